import XCTest
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem
@testable import MFAWire

/// The factor as a sum type (issue 37): each kind's payload, name, record line and wire form,
/// checked for every kind `FactorKind.all` lists — a kind added without them fails here.
final class FactorKindTests: XCTestCase {
    /// One factor of `kind`, with a serial where the kind may have one (a device).
    func sample(_ kind: FactorKind) throws -> Factor {
        let secret = Array("12345678901234567890".utf8)
        switch kind {
        case .totp:
            var f = try Factor(label: Array("app".utf8), parameters: try OTPParameters(algorithm: .sha256, digits: 8, period: 60),
                               created: 1_700_000_000, enrolledStep: 28_333_333, secret: secret)
            f.serial = Array("T-1".utf8)
            return f
        case .hotp:
            var f = try Factor(kind: .hotp, label: Array("fob".utf8), parameters: .default, created: 1_700_000_001,
                               counter: 41, secret: secret)
            f.serial = Array("H-1".utf8)
            return f
        case .sms: return try Factor(outOfBand: .sms, label: Array("phone".utf8), destination: Array("+15105551234".utf8), created: 5)
        case .email: return try Factor(outOfBand: .email, label: Array("mail".utf8), destination: Array("a@example.com".utf8), created: 6)
        }
    }

    func testEveryKindHasItsOwnNameKeywordAndBit() {
        XCTAssertEqual(FactorKind.all.count, 4)
        var bits: UInt8 = 0
        for k in FactorKind.all {
            XCTAssertEqual(FactorKind(name: Array(bytes(k.name))), k)
            XCTAssertEqual(FactorKind(recordKeyword: Array(bytes(k.recordKeyword))), k)
            XCTAssertEqual(FactorKind(rawValue: k.rawValue), k)
            XCTAssertEqual(bits & k.bit, 0, "\(k): a bit of its own")
            bits |= k.bit
            // A kind is answered one way: typed from a device, or sent over a channel.
            XCTAssertEqual(k.channel == nil, k.answering == .typed)
        }
        XCTAssertEqual(FactorKind.allBits, bits)
        XCTAssertEqual(FactorKind.sentBits, FactorKind.sms.bit | FactorKind.email.bit)
        XCTAssertNil(FactorKind(name: Array("factor".utf8)), "the TOTP line's keyword is not a kind's name")
    }

    /// A device holds a key and no destination; a sent kind a destination and no key.
    func testEachKindHoldsOnlyItsOwnPayload() throws {
        for k in FactorKind.all {
            let f = try sample(k)
            XCTAssertEqual(f.kind, k)
            XCTAssertEqual(f.otpKey == nil, f.destination != nil, "\(k)")
            XCTAssertEqual(f.channel == nil, f.otpKey != nil, "\(k)")
            XCTAssertEqual(f.maskedDestination.isEmpty, f.destination == nil, "\(k)")
            XCTAssertNoThrow(try f.validateNew(), "\(k)")
        }
        // The typed constructor refuses what a kind cannot hold.
        XCTAssertThrowsError(try Factor(kind: .totp, label: Array("x".utf8), parameters: .default, created: 0, counter: 3,
                                        secret: [UInt8](repeating: 1, count: 20)))
        XCTAssertThrowsError(try Factor(kind: .hotp, label: Array("x".utf8), parameters: .default, created: 0, enrolledStep: 3,
                                        secret: [UInt8](repeating: 1, count: 20)))
        XCTAssertThrowsError(try Factor(kind: .sms, label: Array("x".utf8), parameters: .default, created: 0,
                                        secret: [UInt8](repeating: 1, count: 20)))
        XCTAssertThrowsError(try Factor(outOfBand: .totp, label: Array("x".utf8), destination: Array("+15105551234".utf8), created: 0))
    }

    func testEveryKindRoundTripsItsRecordLineAndWireForm() throws {
        let factors = try FactorKind.all.map(sample)
        let record = UserRecord(uid: 1000, id: 7, factors: factors)
        XCTAssertEqual(try UserRecord.parse(record.serialized()), record)
        for f in factors {
            var b: [UInt8] = []
            AdminCodec.write(f, withSecret: true, &b)
            var r = Reader(b)
            XCTAssertEqual(try AdminCodec.factor(&r, withSecret: true), f, "\(f.kind)")
            XCTAssertTrue(r.atEnd)
            // Without its secret: a device comes back with none (no stand-in), the rest as it was.
            var c: [UInt8] = []
            AdminCodec.write(f, withSecret: false, &c)
            var s = Reader(c)
            let back = try XCTUnwrap(try AdminCodec.factor(&s, withSecret: false))
            XCTAssertEqual(back, f.withoutSecret, "\(f.kind)")
            XCTAssertEqual(back.otpKey?.secret ?? [], [])
        }
    }

    /// A fleet host sees a mask: it comes back as it is, from a status only, and never passes
    /// as a destination (it was a made-up number overwritten after validation before).
    func testAMaskIsShownAsItIsAndIsNoDestination() throws {
        for (kind, mask) in [(FactorKind.sms, "+1******1234"), (.email, "a***@example.com")] {
            var b: [UInt8] = [kind.rawValue]
            Writer.short(Array("x".utf8), &b)
            Writer.u64(1, &b)
            Writer.short([], &b)
            Writer.short(Array(mask.utf8), &b)
            var r = Reader(b)
            let f = try XCTUnwrap(try AdminCodec.factor(&r, withSecret: false, masked: true))
            XCTAssertEqual(f.destination, Array(mask.utf8))
            // An address's mask has the form of an address (`*` may be in a local part); a
            // number's does not, and only a status may carry it.
            guard kind == .sms else { continue }
            XCTAssertThrowsError(try f.validateNew(), "a mask is not a number")
            var again = Reader(b)
            XCTAssertThrowsError(try AdminCodec.factor(&again, withSecret: false), "only a status may carry a mask")
        }
    }

    /// The factor's wire form changed with the admin protocol's version: a frame of version 1
    /// (a totp-enroll of the last release) is malformed, never read with the new layout.
    func testAFrameOfTheFormerVersionIsMalformed() throws {
        let request = AdminRequest.enroll(user: Array("alice".utf8), uid: 1000, factor: try sample(.totp), importedCodes: nil)
        var frame = try XCTUnwrap(request.encoded())
        XCTAssertEqual(try AdminRequest.decode(frame), request)
        frame[3] = 0x31  // "PTA1"
        XCTAssertThrowsError(try AdminRequest.decode(frame))
    }

    /// A serial is a device's: a phone or address with one is refused before it is saved and
    /// on the wire (the file store would write a `serial` line after an `sms` line, which no
    /// reader takes back: the user's record would no longer read). Found in review.
    func testOnlyADeviceHasASerial() throws {
        for k in [FactorKind.sms, .email] {
            var f = try sample(k)
            f.serial = Array("SN1".utf8)
            XCTAssertThrowsError(try f.validateNew(), "\(k)")
            var b: [UInt8] = []
            AdminCodec.write(f, withSecret: false, &b)
            var r = Reader(b)
            XCTAssertThrowsError(try AdminCodec.factor(&r, withSecret: false), "\(k) with a serial on the wire")
        }
        XCTAssertNoThrow(try sample(.hotp).validateNew())
    }

    /// A broken line is reported by its first broken field, in the order the record is read
    /// (field count, label, algorithm, numbers, secret, ranges), as before the sum type.
    func testABrokenLineIsReportedByItsFirstBrokenField() {
        let secret = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
        let cases: [(String, String)] = [
            ("sms " + String(repeating: "a", count: 65) + " 5 %2B15105551234", "bad factor destination"),
            ("sms phone 5 +1234", "bad factor destination"),
            ("factor %ZZ sha1 6 30 x 0 \(secret)", "bad factor label"),
            ("factor app md5 6 30 0 0 \(secret)", "bad algorithm"),
            ("factor app sha1 6 30 x 0 !!!", "bad factor number"),
            ("factor app sha1 6 30 0 0 !!!", "bad factor secret"),
            ("factor app sha1 9 30 0 0 \(secret)", "bad factor number"),
            ("factor app sha1 6 30 0 0 GEZDGNBV", "factor out of range"),
            ("hotp fob sha1 6 x 0 \(secret)", "bad factor number"),
            ("factor app sha1 6 30 0 \(secret)", "factor line has wrong field count"),
        ]
        for (line, why) in cases {
            let text = "pam_totp 2\naccount 1000 0000000000000007\n" + line + "\n"
            XCTAssertThrowsError(try UserRecord.parse(Array(text.utf8)), line) { error in
                XCTAssertEqual(error as? MFAError, .corruptRecord(Message(Array(why.utf8))), line)
            }
        }
    }
}
