import CLibCrypto
import Foundation
import TestSupport
import XCTest
@testable import MFADaemon
@testable import MFAImport
@testable import MFAPamStacks
@testable import MFACrypto
@testable import MFAPolicy
@testable import MFASystem

/// The PSKC reader (`totp-enroll import-pskc`): RFC 6030's own figures parse and decrypt to
/// the RFC's secret; a changed ciphertext or MAC, a wrong key and an encrypted file without a
/// MAC give an error and no secret (nothing is decrypted before the MACs match); malformed XML
/// is refused with a clear message.
final class PSKCTests: XCTestCase {
    /// The secret of RFC 6030's figures: "12345678901234567890".
    let rfcSecret = Array("12345678901234567890".utf8)
    let preSharedKey: [UInt8] = [0x12, 0x34, 0x56, 0x78, 0x90, 0x12, 0x34, 0x56, 0x78, 0x90, 0x12, 0x34, 0x56, 0x78, 0x90, 0x12]

    // MARK: - RFC 6030's figures

    /// Figure 2: the smallest container (an HOTP key, a 4-byte plain secret "1234", no counter).
    static let figure2 = """
        <?xml version="1.0" encoding="UTF-8"?>
        <KeyContainer Version="1.0"
            Id="exampleID1"
            xmlns="urn:ietf:params:xml:ns:keyprov:pskc">
            <KeyPackage>
                <Key Id="12345678"
                    Algorithm="urn:ietf:params:xml:ns:keyprov:pskc:hotp">
                    <Issuer>Issuer-A</Issuer>
                    <Data>
                        <Secret>
                            <PlainValue>MTIzNA==
                            </PlainValue>
                        </Secret>
                    </Data>
                </Key>
            </KeyPackage>
        </KeyContainer>
        """

    /// Figure 5: a plain HOTP key with a counter, and a PIN key of the same device.
    static let figure5 = """
        <?xml version="1.0" encoding="UTF-8"?>
        <KeyContainer Version="1.0"
            Id="exampleID1"
            xmlns="urn:ietf:params:xml:ns:keyprov:pskc">
            <KeyPackage>
                <DeviceInfo>
                    <Manufacturer>Manufacturer</Manufacturer>
                    <SerialNo>987654321</SerialNo>
                </DeviceInfo>
                <CryptoModuleInfo>
                    <Id>CM_ID_001</Id>
                </CryptoModuleInfo>
                <Key Id="12345678"
                    Algorithm="urn:ietf:params:xml:ns:keyprov:pskc:hotp">
                    <Issuer>Issuer</Issuer>
                    <AlgorithmParameters>
                        <ResponseFormat Length="8" Encoding="DECIMAL"/>
                    </AlgorithmParameters>
                    <Data>
                        <Secret>
                            <PlainValue>MTIzNDU2Nzg5MDEyMzQ1Njc4OTA=
                            </PlainValue>
                        </Secret>
                        <Counter>
                            <PlainValue>0</PlainValue>
                        </Counter>
                    </Data>
                    <Policy>
                        <PINPolicy MinLength="4" MaxLength="4"
                            PINKeyId="123456781" PINEncoding="DECIMAL"
                            PINUsageMode="Local"/>
                        <KeyUsage>OTP</KeyUsage>
                    </Policy>
                </Key>
            </KeyPackage>
            <KeyPackage>
                <DeviceInfo>
                    <Manufacturer>Manufacturer</Manufacturer>
                    <SerialNo>987654321</SerialNo>
                </DeviceInfo>
                <CryptoModuleInfo>
                    <Id>CM_ID_001</Id>
                </CryptoModuleInfo>
                <Key Id="123456781"
                    Algorithm="urn:ietf:params:xml:ns:keyprov:pskc:pin">
                    <Issuer>Issuer</Issuer>
                    <AlgorithmParameters>
                        <ResponseFormat Length="4" Encoding="DECIMAL"/>
                    </AlgorithmParameters>
                    <Data>
                        <Secret>
                            <PlainValue>MTIzNA==</PlainValue>
                        </Secret>
                    </Data>
                </Key>
            </KeyPackage>
        </KeyContainer>
        """

    /// Figure 6: AES-128-CBC with the pre-shared key 12345678901234567890123456789012 (hex); the
    /// MAC key 1122334455667788990011223344556677889900 (hex), encrypted with the same key.
    static let figure6 = """
        <?xml version="1.0" encoding="UTF-8"?>
        <KeyContainer Version="1.0"
            xmlns="urn:ietf:params:xml:ns:keyprov:pskc"
            xmlns:ds="http://www.w3.org/2000/09/xmldsig#"
            xmlns:xenc="http://www.w3.org/2001/04/xmlenc#">
            <EncryptionKey>
                <ds:KeyName>Pre-shared-key</ds:KeyName>
            </EncryptionKey>
            <MACMethod Algorithm="http://www.w3.org/2000/09/xmldsig#hmac-sha1">
                <MACKey>
                    <xenc:EncryptionMethod
                    Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>
                    <xenc:CipherData>
                        <xenc:CipherValue>
            ESIzRFVmd4iZABEiM0RVZgKn6WjLaTC1sbeBMSvIhRejN9vJa2BOlSaMrR7I5wSX
                        </xenc:CipherValue>
                    </xenc:CipherData>
                </MACKey>
            </MACMethod>
            <KeyPackage>
                <DeviceInfo>
                    <Manufacturer>Manufacturer</Manufacturer>
                    <SerialNo>987654321</SerialNo>
                </DeviceInfo>
                <CryptoModuleInfo>
                    <Id>CM_ID_001</Id>
                </CryptoModuleInfo>
                <Key Id="12345678"
                    Algorithm="urn:ietf:params:xml:ns:keyprov:pskc:hotp">
                    <Issuer>Issuer</Issuer>
                    <AlgorithmParameters>
                        <ResponseFormat Length="8" Encoding="DECIMAL"/>
                    </AlgorithmParameters>
                    <Data>
                        <Secret>
                            <EncryptedValue>
                                <xenc:EncryptionMethod
                                Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>
                                <xenc:CipherData>
                                    <xenc:CipherValue>
            AAECAwQFBgcICQoLDA0OD+cIHItlB3Wra1DUpxVvOx2lef1VmNPCMl8jwZqIUqGv
                                    </xenc:CipherValue>
                                </xenc:CipherData>
                            </EncryptedValue>
                            <ValueMAC>Su+NvtQfmvfJzF6bmQiJqoLRExc=
                            </ValueMAC>
                        </Secret>
                        <Counter>
                            <PlainValue>0</PlainValue>
                        </Counter>
                    </Data>
                </Key>
            </KeyPackage>
        </KeyContainer>
        """

    /// Figure 7: PBKDF2 from the passphrase "qwerty" (derived key 651e63cd57008476af1ff6422cd02e41).
    static let figure7 = """
        <?xml version="1.0" encoding="UTF-8"?>
        <pskc:KeyContainer
          xmlns:pskc="urn:ietf:params:xml:ns:keyprov:pskc"
          xmlns:xenc11="http://www.w3.org/2009/xmlenc11#"
          xmlns:pkcs5=
          "http://www.rsasecurity.com/rsalabs/pkcs/schemas/pkcs-5v2-0#"
          xmlns:xenc="http://www.w3.org/2001/04/xmlenc#" Version="1.0">
            <pskc:EncryptionKey>
                <xenc11:DerivedKey>
                    <xenc11:KeyDerivationMethod
                      Algorithm=
         "http://www.rsasecurity.com/rsalabs/pkcs/schemas/pkcs-5v2-0#pbkdf2">
                        <pkcs5:PBKDF2-params>
                            <Salt>
                                <Specified>Ej7/PEpyEpw=</Specified>
                            </Salt>
                            <IterationCount>1000</IterationCount>
                            <KeyLength>16</KeyLength>
                            <PRF/>
                        </pkcs5:PBKDF2-params>
                    </xenc11:KeyDerivationMethod>
                    <xenc:ReferenceList>
                        <xenc:DataReference URI="#ED"/>
                    </xenc:ReferenceList>
                    <xenc11:MasterKeyName>My Password 1</xenc11:MasterKeyName>
                </xenc11:DerivedKey>
            </pskc:EncryptionKey>
            <pskc:MACMethod
                Algorithm="http://www.w3.org/2000/09/xmldsig#hmac-sha1">
                <pskc:MACKey>
                    <xenc:EncryptionMethod
                    Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>
                    <xenc:CipherData>
                        <xenc:CipherValue>
        2GTTnLwM3I4e5IO5FkufoOEiOhNj91fhKRQBtBJYluUDsPOLTfUvoU2dStyOwYZx
                        </xenc:CipherValue>
                    </xenc:CipherData>
                </pskc:MACKey>
            </pskc:MACMethod>
            <pskc:KeyPackage>
                <pskc:DeviceInfo>
                    <pskc:Manufacturer>TokenVendorAcme</pskc:Manufacturer>
                    <pskc:SerialNo>987654321</pskc:SerialNo>
                </pskc:DeviceInfo>
                <pskc:CryptoModuleInfo>
                    <pskc:Id>CM_ID_001</pskc:Id>
                </pskc:CryptoModuleInfo>
                <pskc:Key Algorithm=
                "urn:ietf:params:xml:ns:keyprov:pskc:hotp" Id="123456">
                    <pskc:Issuer>Example-Issuer</pskc:Issuer>
                    <pskc:AlgorithmParameters>
                        <pskc:ResponseFormat Length="8" Encoding="DECIMAL"/>
                    </pskc:AlgorithmParameters>
                    <pskc:Data>
                        <pskc:Secret>
                        <pskc:EncryptedValue Id="ED">
                            <xenc:EncryptionMethod
                                Algorithm=
        "http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>
                                <xenc:CipherData>
                                    <xenc:CipherValue>
              oTvo+S22nsmS2Z/RtcoF8Hfh+jzMe0RkiafpoDpnoZTjPYZu6V+A4aEn032yCr4f
                                </xenc:CipherValue>
                            </xenc:CipherData>
                            </pskc:EncryptedValue>
                            <pskc:ValueMAC>LP6xMvjtypbfT9PdkJhBZ+D6O4w=
                            </pskc:ValueMAC>
                        </pskc:Secret>
                    </pskc:Data>
                </pskc:Key>
            </pskc:KeyPackage>
        </pskc:KeyContainer>
        """

    // MARK: - Helpers

    /// AES-CBC through libcrypto (totp-enroll's CLibCrypto), counting what it is asked to decrypt.
    final class Counting: PSKCDecryptor {
        var calls: [[UInt8]] = []
        func decrypt(_ cipher: PSKCCipher, key: [UInt8], iv: [UInt8], ciphertext: [UInt8]) -> [UInt8]? {
            calls.append(ciphertext)
            guard key.count == cipher.keyLength, ccrypto_load(nil, 0) == 0 else { return nil }
            var out = [UInt8](repeating: 0, count: ciphertext.count)
            var length = 0
            guard ccrypto_aes_cbc_decrypt(key, key.count, iv, ciphertext, ciphertext.count, &out, &length) == 0 else { return nil }
            return Array(out.prefix(length))
        }
    }

    func container(_ text: String) throws -> PSKCContainer { try PSKCContainer(parsing: Array(text.utf8)) }

    /// The message of the error `body` throws (failing if it throws none or another kind).
    func refusal<R>(_ body: () throws(MFAError) -> R, file: StaticString = #filePath, line: UInt = #line) -> String {
        do throws(MFAError) {
            _ = try body()
            XCTFail("no error", file: file, line: line)
            return ""
        } catch {
            guard case .invalidParameters(let m) = error else { XCTFail("wrong error \(error)", file: file, line: line); return "" }
            return m.string
        }
    }

    func hexBytes(_ s: String) -> [UInt8] {
        var out: [UInt8] = []
        var chars = Array(s.utf8)[...]
        while chars.count >= 2 {
            out.append(UInt8(String(decoding: chars.prefix(2), as: UTF8.self), radix: 16)!)
            chars = chars.dropFirst(2)
        }
        return out
    }

    /// Figure 6 with one base64 character of `marker`'s line changed.
    func figure6(changing marker: String, to replacement: String) -> String {
        let f = Self.figure6.replacingOccurrences(of: marker, with: replacement)
        XCTAssertNotEqual(f, Self.figure6)
        return f
    }

    // MARK: - The figures

    func testFigure2PlainSecretAndTheCounterAnHOTPKeyNeeds() throws {
        let c = try container(Self.figure2)
        XCTAssertEqual(c.protection, .none)
        XCTAssertFalse(c.isEncrypted)
        XCTAssertEqual(c.keys.count, 1)
        let key = c.keys[0]
        XCTAssertEqual(key.id, Array("12345678".utf8))
        XCTAssertNil(key.serial)
        XCTAssertEqual(key.kind, .hotp)
        XCTAssertEqual(key.secret, .plain(Array("1234".utf8)))
        let values = try c.decryptedValues(encryptionKey: nil, decryptor: Counting())
        XCTAssertEqual(values.first?.secret, Array("1234".utf8))
        // No counter: an HOTP key cannot be enrolled without one (named by its Key Id).
        let why = refusal { () throws(MFAError) in try c.tokens([0], encryptionKey: nil, decryptor: Counting()) }
        XCTAssertTrue(why.contains("Key Id 12345678") && why.contains("without a Counter"), why)
    }

    func testFigure5PlainHOTPKeyWithCounterAndAPINKeyThatIsNotOne() throws {
        let c = try container(Self.figure5)
        XCTAssertEqual(c.keys.count, 2)
        XCTAssertEqual(c.keys[0].serial, Array("987654321".utf8))
        let tokens = try c.tokens([0], encryptionKey: nil, decryptor: Counting())
        XCTAssertEqual(tokens.count, 1)
        XCTAssertEqual(tokens[0].secret, rfcSecret)
        XCTAssertEqual(tokens[0].kind, .hotp)
        XCTAssertEqual(tokens[0].counter, 0)
        XCTAssertEqual(tokens[0].parameters.digits, 8)
        XCTAssertEqual(tokens[0].parameters.algorithm, .sha1)
        XCTAssertNil(c.keys[1].kind)
        let why = refusal { () throws(MFAError) in try c.tokens([1], encryptionKey: nil, decryptor: Counting()) }
        XCTAssertTrue(why.contains("serial 987654321") && why.contains("pskc:pin") && why.contains("not supported"), why)
    }

    func testFigure6PreSharedKeyAES128CBCWithMAC() throws {
        let c = try container(Self.figure6)
        XCTAssertEqual(c.protection, .preSharedKey(name: Array("Pre-shared-key".utf8)))
        XCTAssertEqual(c.macAlgorithm, .sha1)
        XCTAssertTrue(c.isEncrypted)
        XCTAssertEqual(try c.macKeyBytes(preSharedKey, Counting()), hexBytes("1122334455667788990011223344556677889900"))
        let d = Counting()
        let tokens = try c.tokens([0], encryptionKey: preSharedKey, decryptor: d)
        XCTAssertEqual(tokens.first?.secret, rfcSecret)
        XCTAssertEqual(tokens.first?.counter, 0)
        XCTAssertEqual(tokens.first?.parameters.digits, 8)
        XCTAssertEqual(d.calls.count, 2)  // the MAC key, then the secret
    }

    func testFigure7PBKDF2FromThePassphrase() throws {
        let c = try container(Self.figure7)
        guard case .passphrase(let p) = c.protection else { return XCTFail("not a passphrase: \(c.protection)") }
        XCTAssertEqual(p.iterations, 1000)
        XCTAssertEqual(p.keyLength, 16)
        XCTAssertEqual(p.prf, .sha1)  // <PRF/>: the default
        XCTAssertEqual(p.salt, hexBytes("123eff3c4a72129c"))
        var key = [UInt8](repeating: 0, count: p.keyLength)
        XCTAssertEqual(ccrypto_pbkdf2(Array("qwerty".utf8), 6, p.salt, p.salt.count, UInt32(p.iterations), 1, &key, key.count), 0)
        XCTAssertEqual(key, hexBytes("651e63cd57008476af1ff6422cd02e41"))
        let values = try c.decryptedValues(encryptionKey: key, decryptor: Counting())
        XCTAssertEqual(values.first?.secret, rfcSecret)
        XCTAssertEqual(c.keys[0].serial, Array("987654321".utf8))
        XCTAssertEqual(c.keys[0].id, Array("123456".utf8))
    }

    // MARK: - Integrity

    func testChangedCipherValueFailsTheMACAndNothingIsDecrypted() throws {
        // One base64 character of the secret's ciphertext (after the IV).
        let c = try container(figure6(changing: "AAECAwQFBgcICQoLDA0OD+cIHItlB3Wra1DU", to: "AAECAwQFBgcICQoLDA0OD+cIHItlB3Wra1DV"))
        let d = Counting()
        let why = refusal { () throws(MFAError) in try c.tokens([0], encryptionKey: preSharedKey, decryptor: d) }
        XCTAssertTrue(why.contains("MAC does not verify") && why.contains("nothing was imported"), why)
        XCTAssertFalse(why.contains("987654321"), "every MAC failure says the same: " + why)
        XCTAssertEqual(d.calls.count, 1, "only the MAC key was decrypted")
        // Its IV changed: the same.
        let iv = try container(figure6(changing: "AAECAwQFBgcICQoLDA0OD+cI", to: "AAECAwQFBgcICQoLDA0OD+cJ"))
        let why2 = refusal { () throws(MFAError) in try iv.decryptedValues(encryptionKey: preSharedKey, decryptor: Counting()) }
        XCTAssertTrue(why2.contains("MAC does not verify"), why2)
    }

    /// Review findings: in an encrypted file, a plain secret is covered by no MAC, whether it
    /// replaces the encrypted one or comes in a second Data before it; neither is imported.
    func testAPlainSecretOrASecondDataInAnEncryptedFileIsRefused() throws {
        let plain = "<Secret><PlainValue>QVRUQUNLRVJLTk9XU1RISVMhISE=</PlainValue></Secret>"
        let start = try XCTUnwrap(Self.figure6.range(of: "<Secret>"))
        let end = try XCTUnwrap(Self.figure6.range(of: "</Secret>"))
        let replaced = Self.figure6.replacingCharacters(in: start.lowerBound..<end.upperBound, with: plain)
        let c = try container(replaced)
        let why = refusal { () throws(MFAError) in try c.tokens([0], encryptionKey: preSharedKey, decryptor: Counting()) }
        XCTAssertTrue(why.contains("plaintext secret in an encrypted file") && why.contains("nothing was imported"), why)
        // A second Data (or Secret) ahead of the real one: refused when the file is read.
        let shadow = Self.figure6.replacingOccurrences(of: "<Data>", with: "<Data>" + plain + "</Data><Data>")
        let why2 = refusal { () throws(MFAError) in _ = try PSKCContainer(parsing: Array(shadow.utf8)) }
        XCTAssertTrue(why2.contains("two Data"), why2)
        let twoSecrets = Self.figure6.replacingOccurrences(of: "<Data>", with: "<Data>" + plain)
        let why3 = refusal { () throws(MFAError) in _ = try PSKCContainer(parsing: Array(twoSecrets.utf8)) }
        XCTAssertTrue(why3.contains("two Secret"), why3)
    }

    /// Review finding: the MAC key's bad padding and a MAC that does not match say the same
    /// (two messages were a padding oracle on the pre-shared key).
    func testEveryMACFailureSaysTheSame() throws {
        let macKeyCipher = "ESIzRFVmd4iZABEiM0RVZgKn6WjLaTC1sbeBMSvIhRejN9vJa2BOlSaMrR7I5wSX"
        XCTAssertTrue(Self.figure6.contains(macKeyCipher))
        var texts: Set<String> = []
        for (from, to) in [(String(macKeyCipher.suffix(4)), "AAAA"), (String(macKeyCipher.prefix(4)), "ESIz".reversed().map(String.init).joined())] {
            let c = try container(figure6(changing: from, to: to))
            texts.insert(refusal { () throws(MFAError) in try c.tokens([0], encryptionKey: preSharedKey, decryptor: Counting()) })
        }
        let wrongMAC = try container(figure6(changing: "Su+NvtQfmvfJzF6bmQiJqoLRExc=", to: "Su+MvtQfmvfJzF6bmQiJqoLRExc="))
        texts.insert(refusal { () throws(MFAError) in try wrongMAC.tokens([0], encryptionKey: preSharedKey, decryptor: Counting()) })
        XCTAssertEqual(texts.count, 1, "\(texts)")
    }

    func testChangedValueMACFails() throws {
        let c = try container(figure6(changing: "Su+NvtQfmvfJzF6bmQiJqoLRExc=", to: "Su+MvtQfmvfJzF6bmQiJqoLRExc="))
        let d = Counting()
        let why = refusal { () throws(MFAError) in try c.tokens([0], encryptionKey: preSharedKey, decryptor: d) }
        XCTAssertTrue(why.contains("MAC does not verify"), why)
        XCTAssertEqual(d.calls.count, 1)
    }

    func testWrongKeyGivesNoSecret() throws {
        let c = try container(Self.figure6)
        let d = Counting()
        let wrong = [UInt8](repeating: 0x42, count: 16)
        let why = refusal { () throws(MFAError) in try c.tokens([0], encryptionKey: wrong, decryptor: d) }
        XCTAssertTrue(why.contains("wrong passphrase or key"), why)
        XCTAssertLessThanOrEqual(d.calls.count, 1)
        // A key of the wrong length is refused before anything is decrypted.
        let short = refusal { () throws(MFAError) in try c.tokens([0], encryptionKey: [1, 2, 3], decryptor: d) }
        XCTAssertTrue(short.contains("another length"), short)
        // No key at all.
        let none = refusal { () throws(MFAError) in try c.tokens([0], encryptionKey: nil, decryptor: d) }
        XCTAssertTrue(none.contains("passphrase or a pre-shared key is needed"), none)
    }

    func testEncryptedWithoutMACIsRefused() throws {
        var text = Self.figure6
        let start = try XCTUnwrap(text.range(of: "<MACMethod"))
        let end = try XCTUnwrap(text.range(of: "</MACMethod>"))
        text.removeSubrange(start.lowerBound..<end.upperBound)
        let c = try container(text)
        XCTAssertNil(c.macAlgorithm)
        let d = Counting()
        let why = refusal { () throws(MFAError) in try c.tokens([0], encryptionKey: preSharedKey, decryptor: d) }
        XCTAssertTrue(why.contains("no MAC"), why)
        XCTAssertEqual(d.calls.count, 0)

        // A value without its ValueMAC, in a file with a MACMethod.
        let noValueMAC = Self.figure6.replacingOccurrences(of: "<ValueMAC>Su+NvtQfmvfJzF6bmQiJqoLRExc=\n                    </ValueMAC>", with: "")
        XCTAssertNotEqual(noValueMAC, Self.figure6)
        let withoutValueMAC = try container(noValueMAC)
        let why2 = refusal { () throws(MFAError) in try withoutValueMAC.tokens([0], encryptionKey: preSharedKey, decryptor: d) }
        XCTAssertTrue(why2.contains("no ValueMAC"), why2)
    }

    // MARK: - Keys and their parameters

    /// TOTP keys as python-pskc and vendors write them: `…pskc#totp` and `…pskc:totp`, the hash
    /// in <Suite>, the period in <TimeInterval>, 8 digits.
    func testTOTPKeysSuitesAndPeriods() throws {
        func key(_ serial: String, _ algorithm: String, suite: String?, digits: String?, extra: String) -> String {
            """
            <pskc:KeyPackage><pskc:DeviceInfo><pskc:SerialNo>\(serial)</pskc:SerialNo></pskc:DeviceInfo>
            <pskc:Key Algorithm="\(algorithm)" Id="id-\(serial)"><pskc:AlgorithmParameters>\(suite.map { "<pskc:Suite>\($0)</pskc:Suite>" } ?? "")\
            \(digits.map { "<pskc:ResponseFormat Encoding=\"DECIMAL\" Length=\"\($0)\"/>" } ?? "")</pskc:AlgorithmParameters>
            <pskc:Data><pskc:Secret><pskc:PlainValue>MTIzNDU2Nzg5MDEyMzQ1Njc4OTA=</pskc:PlainValue></pskc:Secret>\(extra)</pskc:Data></pskc:Key></pskc:KeyPackage>
            """
        }
        let text = """
            <?xml version="1.0" encoding="UTF-8"?>
            <pskc:KeyContainer xmlns:pskc="urn:ietf:params:xml:ns:keyprov:pskc" Version="1.0">
            \(key("A", "urn:ietf:params:xml:ns:keyprov:pskc#totp", suite: "hmac-sha256", digits: "8", extra: "<pskc:TimeInterval><pskc:PlainValue>60</pskc:PlainValue></pskc:TimeInterval>"))
            \(key("B", "urn:ietf:params:xml:ns:keyprov:pskc:totp", suite: "HMAC-SHA512", digits: nil, extra: "<pskc:Time><pskc:PlainValue>0</pskc:PlainValue></pskc:Time>"))
            \(key("C", "urn:ietf:params:xml:ns:keyprov:pskc:totp", suite: nil, digits: "6", extra: "<pskc:Time><pskc:PlainValue>1000</pskc:PlainValue></pskc:Time>"))
            \(key("D", "urn:ietf:params:xml:ns:keyprov:pskc:hotp", suite: "SHA-1", digits: "4", extra: "<pskc:Counter><pskc:PlainValue>7</pskc:PlainValue></pskc:Counter>"))
            \(key("E", "urn:ietf:params:xml:ns:keyprov:pskc:hotp", suite: "md5", digits: "6", extra: "<pskc:Counter><pskc:PlainValue>7</pskc:PlainValue></pskc:Counter>"))
            \(key("F", "urn:ietf:params:xml:ns:keyprov:pskc#hotp", suite: nil, digits: "7", extra: "<pskc:Counter><pskc:PlainValue>281474976710655</pskc:PlainValue></pskc:Counter>"))
            </pskc:KeyContainer>
            """
        let c = try container(text)
        XCTAssertEqual(c.keys.map { $0.kind }, [.totp, .totp, .totp, .hotp, .hotp, .hotp])
        let t = try c.tokens([0, 1, 5], encryptionKey: nil, decryptor: Counting())
        XCTAssertEqual(t[0].parameters, try OTPParameters(algorithm: .sha256, digits: 8, period: 60))
        XCTAssertNil(t[0].counter)
        XCTAssertEqual(t[1].parameters, try OTPParameters(algorithm: .sha512, digits: 6, period: 30))
        XCTAssertEqual(t[2].parameters, try OTPParameters(algorithm: .sha1, digits: 7, period: 30))
        XCTAssertEqual(t[2].counter, 281_474_976_710_655)
        XCTAssertTrue(refusal { () throws(MFAError) in try c.tokens([2], encryptionKey: nil, decryptor: Counting()) }.contains("serial C: a Time (T0)"))
        XCTAssertTrue(refusal { () throws(MFAError) in try c.tokens([3], encryptionKey: nil, decryptor: Counting()) }.contains("serial D: codes of 4 digits"))
        XCTAssertTrue(refusal { () throws(MFAError) in try c.tokens([4], encryptionKey: nil, decryptor: Counting()) }.contains("serial E: the hash md5"))
        // A refused key among good ones: nothing is returned.
        XCTAssertTrue(refusal { () throws(MFAError) in try c.tokens([0, 3], encryptionKey: nil, decryptor: Counting()) }.contains("serial D"))
    }

    func testSecretLengthAndCounterLimits() throws {
        func file(_ secret: String, counter: String) -> String {
            """
            <KeyContainer Version="1.0" xmlns="urn:ietf:params:xml:ns:keyprov:pskc"><KeyPackage><DeviceInfo><SerialNo>S</SerialNo></DeviceInfo>
            <Key Id="k" Algorithm="urn:ietf:params:xml:ns:keyprov:pskc:hotp"><Data><Secret><PlainValue>\(secret)</PlainValue></Secret>
            <Counter><PlainValue>\(counter)</PlainValue></Counter></Data></Key></KeyPackage></KeyContainer>
            """
        }
        let nine = Data(repeating: 0x41, count: 9).base64EncodedString()
        let big = Data(repeating: 0x41, count: 129).base64EncodedString()
        let ok = Data(repeating: 0x41, count: 10).base64EncodedString()
        XCTAssertTrue(refusal { () throws(MFAError) in try PSKCContainer(parsing: Array(file(nine, counter: "0").utf8)).tokens([0], encryptionKey: nil, decryptor: Counting()) }.contains("shorter than 80 bits"))
        XCTAssertTrue(refusal { () throws(MFAError) in try PSKCContainer(parsing: Array(file(big, counter: "0").utf8)).tokens([0], encryptionKey: nil, decryptor: Counting()) }.contains("longer than 1024 bits"))
        XCTAssertTrue(refusal { () throws(MFAError) in try PSKCContainer(parsing: Array(file(ok, counter: "281474976710656").utf8)).tokens([0], encryptionKey: nil, decryptor: Counting()) }.contains("2^48"))
        XCTAssertTrue(refusal { () throws(MFAError) in try PSKCContainer(parsing: Array(file(ok, counter: "-1").utf8)).tokens([0], encryptionKey: nil, decryptor: Counting()) }.contains("not a number"))
        XCTAssertTrue(refusal { () throws(MFAError) in try PSKCContainer(parsing: Array(file("!!!", counter: "0").utf8)) }.contains("not valid base64"))
        XCTAssertEqual(try PSKCContainer(parsing: Array(file(ok, counter: "5").utf8)).tokens([0], encryptionKey: nil, decryptor: Counting()).first?.counter, 5)
    }

    /// The fuzz seed whose MACs hold under the harness's key and stand-in decryptor (so that
    /// mutations reach decryption) does: the same stand-in as Fuzz/Targets.swift.
    func testFuzzSeedPassesTheHarnessMACs() throws {
        struct StandIn: PSKCDecryptor {
            func decrypt(_ cipher: PSKCCipher, key: [UInt8], iv: [UInt8], ciphertext: [UInt8]) -> [UInt8]? {
                guard let last = ciphertext.last, last >= 1, last <= 16, Int(last) <= ciphertext.count else { return nil }
                return Array(ciphertext.dropLast(Int(last)))
            }
        }
        let url = packageRoot.appendingPathComponent("Fuzz/corpus/pskc/hand-macs-valid-for-harness")
        let c = try PSKCContainer(parsing: Array(try Data(contentsOf: url)))
        let t = try c.tokens([0], encryptionKey: [UInt8](repeating: 0x11, count: 16), decryptor: StandIn())
        XCTAssertEqual(t.first?.secret, rfcSecret)
        XCTAssertEqual(t.first?.counter, 7)
    }

    // MARK: - The XML reader

    func testXMLReaderEntitiesCDATACommentsAndPrefixes() throws {
        let text = """
            \u{FEFF}<?xml version="1.0"?>
            <!-- before -->
            <a:Root xmlns:a="urn:x" b:Attr='1 &amp; &#x32;&#51;'>
              <a:Child>&lt;x&gt; &quot;&apos; &#233;<![CDATA[<raw & text>]]><!-- inside --><?pi stuff?></a:Child>
              <Empty/>
            </a:Root>
            <!-- after -->
            """
        let root = try XMLReader.parse(Array(text.utf8))
        XCTAssertEqual(root.name, Array("Root".utf8))
        XCTAssertEqual(root.attribute("Attr"), Array("1 & 23".utf8))
        XCTAssertEqual(root.children.map { String(decoding: $0.name, as: UTF8.self) }, ["Child", "Empty"])
        XCTAssertEqual(String(decoding: root.children[0].text, as: UTF8.self), "<x> \"' é<raw & text>")
    }

    func testMalformedXMLIsRefusedClearly() {
        let deep = String(repeating: "<a>", count: 40) + String(repeating: "</a>", count: 40)
        let cases: [(String, String)] = [
            ("", "empty"),
            ("<!DOCTYPE x [<!ENTITY e \"boom\">]><x>&e;</x>", "DOCTYPE"),
            ("<a><b></a>", "does not match"),
            ("<a>", "ends inside an element"),
            ("<a>&bogus;</a>", "unknown entity"),
            ("<a>&#0;</a>", "does not allow"),
            ("<a>&#xD800;</a>", "does not allow"),
            ("<a x='1' x='2'/>", "appears twice"),
            ("<a x=1/>", "not quoted"),
            ("<a:/>", "prefix or local part is empty"),
            ("<:a/>", "prefix or local part is empty"),
            ("<a:b:c/>", "prefix or local part is empty"),
            ("<a/><b/>", "after the root"),
            ("text", "no root element"),
            ("<a><!-- open</a>", "comment is not closed"),
            ("<a><![CDATA[x</a>", "CDATA section is not closed"),
            ("<a x='<'/>", "'<' in an attribute"),
            ("<a>\0</a>", "NUL"),
            (deep, "32 deep"),
        ]
        for (text, expected) in cases {
            let why = refusal { () throws(MFAError) in try XMLReader.parse(Array(text.utf8)) }
            XCTAssertTrue(why.contains(expected), "\(text.prefix(40)): \(why)")
        }
        XCTAssertTrue(refusal { () throws(MFAError) in try XMLReader.parse([UInt8](repeating: 0x20, count: XMLReader.maxSize + 1)) }.contains("4 MiB"))
        // Well-formed XML that is not PSKC.
        XCTAssertTrue(refusal { () throws(MFAError) in try PSKCContainer(parsing: Array("<Other/>".utf8)) }.contains("not a PSKC file"))
        XCTAssertTrue(refusal { () throws(MFAError) in try PSKCContainer(parsing: Array("<KeyContainer Version='2.0'/>".utf8)) }.contains("version"))
        // The error names the line.
        XCTAssertTrue(refusal { () throws(MFAError) in try XMLReader.parse(Array("<a>\n\n<b></c></a>".utf8)) }.hasPrefix("XML line 3:"))
    }

    func testBase64() {
        XCTAssertEqual(base64Decode(Array("MTIzNA==".utf8)), Array("1234".utf8))
        XCTAssertEqual(base64Decode(Array(" MTIz\nNDU2 ".utf8)), Array("123456".utf8))
        XCTAssertEqual(base64Decode(Array("MTIzNA".utf8)), Array("1234".utf8))
        XCTAssertNil(base64Decode(Array("MT=IzNA".utf8)))
        XCTAssertNil(base64Decode(Array("M".utf8)))
        XCTAssertNil(base64Decode(Array("MTIzNA===".utf8)))
        XCTAssertNil(base64Decode(Array("MT!z".utf8)))
    }
}
