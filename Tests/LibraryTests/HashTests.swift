import Foundation
import XCTest

@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

final class HashTests: XCTestCase {

    // MARK: - Helpers

    private func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// SplitMix64: a tiny deterministic generator so the cross-check inputs are reproducible.
    private struct SplitMix64 {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func bytes(_ count: Int) -> [UInt8] {
            (0..<count).map { _ in UInt8(truncatingIfNeeded: next()) }
        }
        mutating func int(in range: ClosedRange<Int>) -> Int {
            range.lowerBound + Int(next() % UInt64(range.count))
        }
    }

    /// Runs one python3 process: writes `input` to its stdin, returns its stdout lines.
    private func runPython(_ script: String, input: String, file: StaticString = #filePath,
                           line: UInt = #line) throws -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script]
        let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        // The script reads all of stdin before writing anything, so writing everything first and
        // then reading cannot deadlock.
        stdin.fileHandleForWriting.write(Data(input.utf8))
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        let errors = stderr.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0,
                       "python3 failed: \(String(decoding: errors, as: UTF8.self))",
                       file: file, line: line)
        return String(decoding: output, as: UTF8.self)
            .split(separator: "\n", omittingEmptySubsequences: false)
            .dropLast()  // trailing newline
            .map(String.init)
    }

    private func name(_ algorithm: HashAlgorithm) -> String {
        switch algorithm {
        case .sha1: return "sha1"
        case .sha256: return "sha256"
        case .sha512: return "sha512"
        }
    }

    private static let abc448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
    private static let abc896 =
        "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"
    private static let millionA = [UInt8](repeating: 0x61, count: 1_000_000)

    // MARK: - Algorithm properties

    func testAlgorithmLengthsAndDispatch() {
        XCTAssertEqual(HashAlgorithm.sha1.digestLength, 20)
        XCTAssertEqual(HashAlgorithm.sha256.digestLength, 32)
        XCTAssertEqual(HashAlgorithm.sha512.digestLength, 64)
        XCTAssertEqual(HashAlgorithm.sha1.blockLength, 64)
        XCTAssertEqual(HashAlgorithm.sha256.blockLength, 64)
        XCTAssertEqual(HashAlgorithm.sha512.blockLength, 128)
        let message = bytes("abc")
        XCTAssertEqual(HashAlgorithm.sha1.hash(message), SHA1.hash(message))
        XCTAssertEqual(HashAlgorithm.sha256.hash(message), SHA256.hash(message))
        XCTAssertEqual(HashAlgorithm.sha512.hash(message), SHA512.hash(message))
        for algorithm in [HashAlgorithm.sha1, .sha256, .sha512] {
            XCTAssertEqual(algorithm.hash(message).count, algorithm.digestLength)
            XCTAssertEqual(hmac(algorithm, key: [1, 2, 3], message: message).count, algorithm.digestLength)
            XCTAssertEqual(HMACKey(algorithm: algorithm, key: [1]).algorithm, algorithm)
        }
    }

    // MARK: - FIPS 180-4 / NIST example vectors

    func testSHA1Vectors() {
        XCTAssertEqual(hex(SHA1.hash(bytes("abc"))), "a9993e364706816aba3e25717850c26c9cd0d89d")
        XCTAssertEqual(hex(SHA1.hash([])), "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        XCTAssertEqual(hex(SHA1.hash(bytes(Self.abc448))), "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        XCTAssertEqual(hex(SHA1.hash(bytes(Self.abc896))), "a49b2446a02c645bf419f995b67091253a04a259")
        XCTAssertEqual(hex(SHA1.hash(Self.millionA)), "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    func testSHA256Vectors() {
        XCTAssertEqual(hex(SHA256.hash(bytes("abc"))),
                       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(hex(SHA256.hash([])),
                       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(hex(SHA256.hash(bytes(Self.abc448))),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        XCTAssertEqual(hex(SHA256.hash(bytes(Self.abc896))),
                       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1")
        XCTAssertEqual(hex(SHA256.hash(Self.millionA)),
                       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    func testSHA512Vectors() {
        XCTAssertEqual(
            hex(SHA512.hash(bytes("abc"))),
            "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
                + "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f")
        XCTAssertEqual(
            hex(SHA512.hash([])),
            "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce"
                + "47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e")
        XCTAssertEqual(
            hex(SHA512.hash(bytes(Self.abc448))),
            "204a8fc6dda82f0a0ced7beb8e08a41657c16ef468b228a8279be331a703c335"
                + "96fd15c13b1b07f9aa1d3bea57789ca031ad85c7a71dd70354ec631238ca3445")
        XCTAssertEqual(
            hex(SHA512.hash(bytes(Self.abc896))),
            "8e959b75dae313da8cf4f72814fc143f8f7779c6eb9f7fa17299aeadb6889018"
                + "501d289e4900f7e4331b99dec4b5433ac7d329eeb6dd26545e96e55b874be909")
        XCTAssertEqual(
            hex(SHA512.hash(Self.millionA)),
            "e718483d0ce769644e2e42c7bc15b4638e1f98b13b2044285632a803afa973eb"
                + "de0ff244877ea60a4cb0432ce577c31beb009c5c2c49aa2e4eadb217ad8cc09b")
    }

    // MARK: - RFC 4231 (HMAC-SHA-256/512) and RFC 2202 (HMAC-SHA-1)

    private struct HMACCase {
        let key: [UInt8]
        let data: [UInt8]
        let truncate: Int?
    }

    private func hmacCases() -> [HMACCase] {
        [
            HMACCase(key: [UInt8](repeating: 0x0b, count: 20), data: bytes("Hi There"), truncate: nil),
            HMACCase(key: bytes("Jefe"), data: bytes("what do ya want for nothing?"), truncate: nil),
            HMACCase(key: [UInt8](repeating: 0xaa, count: 20), data: [UInt8](repeating: 0xdd, count: 50),
                     truncate: nil),
            HMACCase(key: Array(1...25), data: [UInt8](repeating: 0xcd, count: 50), truncate: nil),
            HMACCase(key: [UInt8](repeating: 0x0c, count: 20), data: bytes("Test With Truncation"),
                     truncate: 16),
            HMACCase(key: [UInt8](repeating: 0xaa, count: 131),
                     data: bytes("Test Using Larger Than Block-Size Key - Hash Key First"), truncate: nil),
            HMACCase(key: [UInt8](repeating: 0xaa, count: 131),
                     data: bytes("This is a test using a larger than block-size key and a larger than "
                                 + "block-size data. The key needs to be hashed before being used by the "
                                 + "HMAC algorithm."),
                     truncate: nil),
        ]
    }

    private func check(_ algorithm: HashAlgorithm, _ cases: [HMACCase], _ expected: [String],
                       file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(cases.count, expected.count, file: file, line: line)
        for (index, (c, want)) in zip(cases, expected).enumerated() {
            var mac = hmac(algorithm, key: c.key, message: c.data)
            XCTAssertEqual(mac.count, algorithm.digestLength, file: file, line: line)
            if let t = c.truncate { mac = Array(mac.prefix(t)) }
            XCTAssertEqual(hex(mac), want, "case \(index + 1)", file: file, line: line)
        }
    }

    func testHMACSHA256RFC4231() {
        check(.sha256, hmacCases(), [
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            "a3b6167473100ee06e0c796c2955552b",
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
        ])
    }

    func testHMACSHA512RFC4231() {
        check(.sha512, hmacCases(), [
            "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cde"
                + "daa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854",
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554"
                + "9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737",
            "fa73b0089d56a284efb0f0756c890be9b1b5dbdd8ee81a3655f83e33b2279d39"
                + "bf3e848279a722c806b485a47e67c807b946a337bee8942674278859e13292fb",
            "b0ba465637458c6990e5a8c5f61d4af7e576d97ff94b872de76f8050361ee3db"
                + "a91ca5c11aa25eb4d679275cc5788063a5f19741120c4f2de2adebeb10a298dd",
            "415fad6271580a531d4179bc891d87a6",
            "80b24263c7c1a3ebb71493c1dd7be8b49b46d1f41b4aeec1121b013783f8f352"
                + "6b56d037e05f2598bd0fd2215d6a1e5295e64f73f63f0aec8b915a985d786598",
            "e37b6a775dc87dbaa4dfa9f96e5e3ffddebd71f8867289865df5a32d20cdc944"
                + "b6022cac3c4982b10d5eeb55c3e4de15134676fb6de0446065c97440fa8c6a58",
        ])
    }

    func testHMACSHA1RFC2202() {
        let cases = [
            HMACCase(key: [UInt8](repeating: 0x0b, count: 20), data: bytes("Hi There"), truncate: nil),
            HMACCase(key: bytes("Jefe"), data: bytes("what do ya want for nothing?"), truncate: nil),
            HMACCase(key: [UInt8](repeating: 0xaa, count: 20), data: [UInt8](repeating: 0xdd, count: 50),
                     truncate: nil),
            HMACCase(key: Array(1...25), data: [UInt8](repeating: 0xcd, count: 50), truncate: nil),
            HMACCase(key: [UInt8](repeating: 0x0c, count: 20), data: bytes("Test With Truncation"),
                     truncate: nil),
            HMACCase(key: [UInt8](repeating: 0xaa, count: 80),
                     data: bytes("Test Using Larger Than Block-Size Key - Hash Key First"), truncate: nil),
            HMACCase(key: [UInt8](repeating: 0xaa, count: 80),
                     data: bytes("Test Using Larger Than Block-Size Key and Larger Than One Block-Size Data"),
                     truncate: nil),
        ]
        check(.sha1, cases, [
            "b617318655057264e28bc0b6fb378c8ef146be00",
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
            "125d7342b9ac11cd91a39af48aa17b4f63f175d3",
            "4c9007f4026250c6bc8414f9bf50c86c2d7235da",
            "4c1a03424b55e07fe7f27be1d58bb9324a9a5a04",
            "aa4ae5e15272d00e95705637ce8a3b55ed402112",
            "e8e99d0f45237d786d6bbaa7965c7808bbff1a91",
        ])
        // RFC 2202 case 5 also lists the 96-bit truncation.
        XCTAssertEqual(hex(Array(hmac(.sha1, key: cases[4].key, message: cases[4].data).prefix(12))),
                       "4c1a03424b55e07fe7f27be1")
    }

    func testHMACKeyReuseMatchesOneShot() {
        var rng = SplitMix64(state: 0x5EED_0001)
        for algorithm in [HashAlgorithm.sha1, .sha256, .sha512] {
            for keyLength in [0, 1, 20, 63, 64, 65, 127, 128, 129, 200] {
                let key = rng.bytes(keyLength)
                let prepared = HMACKey(algorithm: algorithm, key: key)
                let messages = (0..<6).map { rng.bytes([0, 8, 8, 55, 64, 300][$0]) }
                var seen = Set<[UInt8]>()
                // Twice over, to show that authenticating does not disturb the stored state.
                for _ in 0..<2 {
                    for message in messages {
                        let mac = prepared.authenticate(message)
                        XCTAssertEqual(mac, hmac(algorithm, key: key, message: message),
                                       "\(algorithm) key \(keyLength) msg \(message.count)")
                        seen.insert(mac)
                    }
                }
                XCTAssertEqual(seen.count, messages.count, "distinct messages give distinct MACs")
            }
        }
        // And the reused key agrees with a published vector (RFC 4231 case 2).
        let jefe = HMACKey(algorithm: .sha256, key: bytes("Jefe"))
        _ = jefe.authenticate(bytes("something else first"))
        XCTAssertEqual(hex(jefe.authenticate(bytes("what do ya want for nothing?"))),
                       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    // MARK: - Cross-check against Python's hashlib / hmac

    func testHashesMatchPythonHashlib() throws {
        var rng = SplitMix64(state: 0x00C0_FFEE)
        var messages: [[UInt8]] = []
        for length in 0...300 { messages.append(rng.bytes(length)) }
        let algorithms: [HashAlgorithm] = [.sha1, .sha256, .sha512]
        var input = ""
        for algorithm in algorithms {
            for message in messages { input += "\(name(algorithm)) \(hex(message))\n" }
        }
        let script = """
            import sys, hashlib
            lines = sys.stdin.read().splitlines()
            out = []
            for line in lines:
                alg, msg = (line.split(" ") + [""])[:2]
                out.append(hashlib.new(alg, bytes.fromhex(msg)).hexdigest())
            sys.stdout.write("\\n".join(out) + "\\n")
            """
        let expected = try runPython(script, input: input)
        XCTAssertEqual(expected.count, algorithms.count * messages.count)
        guard expected.count == algorithms.count * messages.count else { return }
        var index = 0
        for algorithm in algorithms {
            for message in messages {
                XCTAssertEqual(hex(algorithm.hash(message)), expected[index],
                               "\(algorithm) length \(message.count)")
                index += 1
            }
        }
    }

    func testHMACMatchesPythonHMAC() throws {
        var rng = SplitMix64(state: 0xDEAD_BEEF)
        // Every message length 0...300; key lengths cover every value 0...200 once, then random.
        var pairs: [(key: [UInt8], message: [UInt8])] = []
        for length in 0...300 {
            let keyLength = length <= 200 ? length : rng.int(in: 0...200)
            pairs.append((rng.bytes(keyLength), rng.bytes(length)))
        }
        let algorithms: [HashAlgorithm] = [.sha1, .sha256, .sha512]
        var input = ""
        for algorithm in algorithms {
            for pair in pairs { input += "\(name(algorithm)) \(hex(pair.key)) \(hex(pair.message))\n" }
        }
        let script = """
            import sys, hmac, hashlib
            lines = sys.stdin.read().splitlines()
            out = []
            for line in lines:
                alg, key, msg = line.split(" ")
                out.append(hmac.new(bytes.fromhex(key), bytes.fromhex(msg), getattr(hashlib, alg)).hexdigest())
            sys.stdout.write("\\n".join(out) + "\\n")
            """
        let expected = try runPython(script, input: input)
        XCTAssertEqual(expected.count, algorithms.count * pairs.count)
        guard expected.count == algorithms.count * pairs.count else { return }
        var index = 0
        for algorithm in algorithms {
            for pair in pairs {
                let want = expected[index]
                XCTAssertEqual(hex(hmac(algorithm, key: pair.key, message: pair.message)), want,
                               "\(algorithm) key \(pair.key.count) message \(pair.message.count)")
                XCTAssertEqual(hex(HMACKey(algorithm: algorithm, key: pair.key).authenticate(pair.message)),
                               want)
                index += 1
            }
        }
    }
}
