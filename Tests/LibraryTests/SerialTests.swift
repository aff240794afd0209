import XCTest
import TestSupport
@testable import MFADaemon
@testable import MFAImport
@testable import MFAPamStacks
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem
@testable import MFAWire

/// A hardware token's serial number (issue 20): a factor's optional attribute, set by
/// import-pskc, kept in the record (a `serial` line after its factor line) and carried by the
/// admin protocol. A record without serials is the text it always was.
final class SerialTests: XCTestCase {
    let secret = Array("12345678901234567890".utf8)

    /// A record of today's format (version 2) without serials: a TOTP factor, an HOTP token, a
    /// recovery set with a code.
    let today = """
        pam_totp 2
        account 1000 0123456789abcdef
        factor phone%20a sha1 6 30 1700000000 56666666 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ
        hotp fob sha256 8 5 1700000001 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ
        recovery 00000000000000aa 1000 0011223344556677
        recovery-code \(String(repeating: "ab", count: 32))

        """

    func todaysRecord() throws -> UserRecord {
        let totp = try Factor(label: Array("phone a".utf8), parameters: .default, created: 1_700_000_000, enrolledStep: 56_666_666, secret: secret)
        let hotp = try Factor(kind: .hotp, label: Array("fob".utf8), parameters: try OTPParameters(algorithm: .sha256, digits: 8, period: 30),
                              created: 1_700_000_001, counter: 5, secret: secret)
        return UserRecord(uid: 1000, id: 0x0123_4567_89AB_CDEF, factors: [totp, hotp],
                          recovery: RecoverySet(id: 0xAA, iterations: 1000, salt: [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77],
                                                hashes: [[UInt8](repeating: 0xAB, count: 32)]))
    }

    func testARecordWithoutSerialsIsWrittenByteForByteAsBefore() throws {
        let record = try todaysRecord()
        XCTAssertEqual(String(decoding: record.serialized(), as: UTF8.self), today)
        let read = try UserRecord.parse(Array(today.utf8))
        XCTAssertEqual(read, record)
        XCTAssertTrue(read.factors.allSatisfy { $0.serial.isEmpty })
        XCTAssertEqual(read.serialized(), Array(today.utf8))
    }

    func testASerialRoundTripsOnItsOwnLineAfterItsFactor() throws {
        var record = try todaysRecord()
        record.factors[1].serial = Array("UBHE 1234 %x".utf8)
        let text = String(decoding: record.serialized(), as: UTF8.self)
        XCTAssertEqual(text, today.replacingOccurrences(of: "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\nrecovery ",
                                                         with: "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\nserial UBHE%201234%20%25x\nrecovery "))
        let read = try UserRecord.parse(record.serialized())
        XCTAssertEqual(read, record)
        XCTAssertEqual(read.factors.map(\.serial), [[], Array("UBHE 1234 %x".utf8)])
        // Both factors with one: each line applies to the factor just before it.
        record.factors[0].serial = Array("A1".utf8)
        XCTAssertEqual(try UserRecord.parse(record.serialized()).factors.map(\.serial), [Array("A1".utf8), Array("UBHE 1234 %x".utf8)])
    }

    func testAMisplacedOrMalformedSerialLineMakesTheRecordCorrupt() throws {
        let head = "pam_totp 2\naccount 1000 0123456789abcdef\n"
        let factor = "factor phone sha1 6 30 1700000000 0 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n"
        let recovery = "recovery 00000000000000aa 1000 0011223344556677\n"
        XCTAssertEqual(try UserRecord.parse(Array((head + factor + "serial S1\n").utf8)).factors.first?.serial, Array("S1".utf8))
        let refused = [
            head + "serial S1\n" + factor,                            // no factor before it
            head + factor + "serial S1\nserial S2\n",                  // twice for one factor
            head + factor + recovery + "serial S1\n",                  // after another line
            head + factor + "serial\n",                                // no serial
            head + factor + "serial \n",                               // an empty one
            head + factor + "serial S1 S2\n",                          // two fields
            head + factor + "serial S%1\n",                            // bad percent-encoding
            head + factor + "serial a%0Ab\n",                          // a control character
            head + factor + "serial " + String(repeating: "x", count: 65) + "\n",  // over 64 bytes
            "pam_totp 2\nserial S1\naccount 1000 0123456789abcdef\n" + factor,
            // After a phone or an address (make fuzz's record target: it parsed, and was dropped
            // when the record was written back, so the record read back differed).
            head + "sms mobile 1700000301 %2B15105551234\nserial S1\n",
            head + "email mail 1700000301 a%40example.com\nserial S1\n",
        ]
        for text in refused {
            XCTAssertThrowsError(try UserRecord.parse(Array(text.utf8)), text) { error in
                guard case .corruptRecord = error as? MFAError else { return XCTFail("\(error)") }
            }
        }
        XCTAssertEqual(try UserRecord.parse(Array((head + factor + "serial " + String(repeating: "x", count: 64) + "\n").utf8))
                        .factors.first?.serial.count, 64)
    }

    func testTheFileStoreKeepsTheSerialAndRefusesAnUnprintableOne() throws {
        let (dir, path) = try makeTemporaryStoreDirectory()
        defer { removeTemporaryDirectory(dir) }
        let store = try Store(path: Array(path.utf8))
        var rng = SplitMix64(seed: 1)
        var f = try Factor(kind: .hotp, label: Array("fob".utf8), parameters: .default, created: 1, counter: 0, secret: secret)
        f.serial = Array("UBHE00012345".utf8)
        try store.enroll(user: Array("alice".utf8), accountUID: 1000, factor: f, using: &rng)
        XCTAssertEqual(try store.read(user: Array("alice".utf8))?.factors.map(\.serial), [Array("UBHE00012345".utf8)])
        var bad = try Factor(label: Array("other".utf8), parameters: .default, created: 1, secret: [UInt8](repeating: 9, count: 20))
        for serial in [Array("a\u{202E}b".utf8), [UInt8](repeating: 0x61, count: 65), [0xFF]] {
            bad.serial = serial
            XCTAssertThrowsError(try store.enroll(user: Array("alice".utf8), accountUID: 1000, factor: bad, using: &rng))
        }
        XCTAssertEqual(try store.read(user: Array("alice".utf8))?.factors.count, 1)
    }

    func testTheAdminProtocolCarriesTheSerial() throws {
        var f = try Factor(kind: .hotp, label: Array("fob".utf8), parameters: .default, created: 1, counter: 7, secret: secret)
        f.serial = Array("UBHE00012345".utf8)
        let request = AdminRequest.enroll(user: Array("alice".utf8), uid: 1000, factor: f, importedCodes: nil)
        let frame = try XCTUnwrap(request.encoded())
        XCTAssertEqual(try AdminRequest.decode(frame), request)
        guard case .enroll(_, _, let back, _) = try AdminRequest.decode(frame) else { return XCTFail("enroll") }
        XCTAssertEqual(back.serial, f.serial)
        // Without one: an empty field, read back as none.
        let plain = AdminRequest.enroll(user: Array("alice".utf8), uid: 1000, factor: try todaysRecord().factors[0], importedCodes: nil)
        XCTAssertEqual(try AdminRequest.decode(try XCTUnwrap(plain.encoded())), plain)
        // A status reply shows it (the secret stays out).
        let status = UserStatus(record: UserRecord(uid: 1000, factors: [f]), state: UserState())
        guard case .status(let s?) = try AdminReply.decode(AdminReply.status(status).encoded()) else { return XCTFail("status") }
        XCTAssertEqual(s.record.factors.map(\.serial), [f.serial])
        // A serial a stored one may not be (a control character) is malformed.
        var raw = frame
        let at = try XCTUnwrap(indexOf(Array("UBHE".utf8), in: raw))
        raw[at] = 0x0A
        XCTAssertThrowsError(try AdminRequest.decode(raw))
    }

    /// 32 factors with 64-byte labels and 64-byte serials do not fit in one frame: the status
    /// comes without the serials rather than not at all.
    func testTheLargestStatusWithSerialsStillFits() throws {
        var big = UserRecord(uid: 1)
        for i in 0..<UserRecord.maxFactors {
            var f = try Factor(label: Array(String(format: "%02d", i).utf8) + [UInt8](repeating: 0x78, count: 62), parameters: .default,
                               created: 1, secret: secret)
            f.serial = [UInt8](repeating: 0x53, count: 64)
            big.factors.append(f)
        }
        guard case .status(let b?) = try AdminReply.decode(AdminReply.status(UserStatus(record: big, state: UserState())).encoded()) else {
            return XCTFail("the largest status")
        }
        XCTAssertEqual(b.record.factors.map(\.label), big.factors.map(\.label))
        XCTAssertTrue(b.record.factors.allSatisfy { $0.serial.isEmpty })
        // A few serials fit and are kept.
        big.factors.removeLast(UserRecord.maxFactors - 4)
        guard case .status(let small?) = try AdminReply.decode(AdminReply.status(UserStatus(record: big, state: UserState())).encoded()) else {
            return XCTFail("a small status")
        }
        XCTAssertEqual(small.record.factors.map(\.serial), big.factors.map(\.serial))
    }

    func indexOf(_ needle: [UInt8], in hay: [UInt8]) -> Int? {
        guard needle.count <= hay.count else { return nil }
        for i in 0...(hay.count - needle.count) where Array(hay[i..<i + needle.count]) == needle { return i }
        return nil
    }
}
