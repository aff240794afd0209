import XCTest
import TestSupport
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

final class OTPTests: XCTestCase {
    let rfcSecret1 = Array("12345678901234567890".utf8)
    let rfcSecret256 = Array("12345678901234567890123456789012".utf8)
    let rfcSecret512 = Array("1234567890123456789012345678901234567890123456789012345678901234".utf8)

    func string(_ b: [UInt8]) -> String { String(decoding: b, as: UTF8.self) }

    /// RFC 4226 Appendix D: HOTP values for counters 0...9.
    func testRFC4226AppendixD() {
        let expected = ["755224", "287082", "359152", "969429", "338314",
                        "254676", "287922", "162583", "399871", "520489"]
        let key = HMACKey(algorithm: .sha1, key: rfcSecret1)
        for (counter, code) in expected.enumerated() {
            XCTAssertEqual(string(HOTP.code(key: key, counter: UInt64(counter), digits: 6)), code, "counter \(counter)")
        }
    }

    /// RFC 6238 Appendix B: all three algorithms, 8 digits, including T beyond 2^32 seconds.
    func testRFC6238AppendixB() throws {
        let times: [Int64] = [59, 1111111109, 1111111111, 1234567890, 2000000000, 20000000000]
        let table: [(HashAlgorithm, [UInt8], [String])] = [
            (.sha1, rfcSecret1, ["94287082", "07081804", "14050471", "89005924", "69279037", "65353130"]),
            (.sha256, rfcSecret256, ["46119246", "68084774", "67062674", "91819424", "90698825", "77737706"]),
            (.sha512, rfcSecret512, ["90693936", "25091201", "99943326", "93441116", "38618901", "47863826"]),
        ]
        for (algorithm, secret, codes) in table {
            let p = try OTPParameters(algorithm: algorithm, digits: 8, period: 30)
            for (t, code) in zip(times, codes) {
                XCTAssertEqual(string(try TOTP.code(secret: secret, parameters: p, at: t)), code, "\(algorithm) at \(t)")
            }
        }
        // 6 digits are the last six of the 8-digit value (same truncation, smaller modulus).
        let p6 = try OTPParameters(algorithm: .sha1, digits: 6, period: 30)
        XCTAssertEqual(string(try TOTP.code(secret: rfcSecret1, parameters: p6, at: 59)), "287082")
        XCTAssertEqual(string(try TOTP.code(secret: rfcSecret1, parameters: p6, at: 20000000000)), "353130")
    }

    func testStepBeyond32BitsAndClockBeforeEpoch() throws {
        // With a 1 s period, T itself exceeds 2^32.
        XCTAssertEqual(try TOTP.step(at: 5_000_000_000, period: 1), 5_000_000_000)
        XCTAssertThrowsError(try TOTP.step(at: -1, period: 30))
        XCTAssertThrowsError(try OTPParameters(algorithm: .sha1, digits: 9, period: 30))
        XCTAssertThrowsError(try OTPParameters(algorithm: .sha1, digits: 6, period: 0))
        XCTAssertThrowsError(try OTPParameters(algorithm: .sha1, digits: 6, period: 3601))
    }

    /// Independent implementation: oathtool, for random secrets, all algorithms, 6/7/8 digits,
    /// several periods and times, including T > 2^32 (period 1 at a time past 2^32).
    func testAgainstOathtool() throws {
        var rng = SplitMix64(seed: 6238)
        let algorithms: [(HashAlgorithm, String)] = [(.sha1, "SHA1"), (.sha256, "SHA256"), (.sha512, "SHA512")]
        for i in 0..<36 {
            let (algorithm, name) = algorithms[i % 3]
            let digits = 6 + (i / 3) % 3
            let period: UInt64 = [30, 60, 1, 45][i % 4]
            let secret = Secret.generate(for: algorithm, using: &rng)
            let t: Int64 = i % 4 == 2 ? 4_294_967_296 + Int64(rng.next() % 1_000_000) : Int64(rng.next() % 4_000_000_000)
            let p = try OTPParameters(algorithm: algorithm, digits: digits, period: period)
            let ours = string(try TOTP.code(secret: secret, parameters: p, at: t))
            let theirs = try runCommand(["oathtool", "--totp=\(name)", "--digits=\(digits)", "--time-step-size=\(period)s",
                                  "--now=@\(t)", hex(secret)])
            XCTAssertEqual(theirs.status, 0, theirs.stderr)
            XCTAssertEqual(ours, theirs.stdout.trimmingCharacters(in: .whitespacesAndNewlines),
                           "\(name) digits \(digits) period \(period) t \(t)")
        }
    }

    func testSecretLengthsFollowTheDigest() {
        var rng = SplitMix64(seed: 1)
        XCTAssertEqual(Secret.generate(for: .sha1, using: &rng).count, 20)
        XCTAssertEqual(Secret.generate(for: .sha256, using: &rng).count, 32)
        XCTAssertEqual(Secret.generate(for: .sha512, using: &rng).count, 64)
        // The system generator gives different keys each time.
        XCTAssertNotEqual(Secret.generate(for: .sha1), Secret.generate(for: .sha1))
    }
}

final class WindowTests: XCTestCase {
    let secret = Array("12345678901234567890".utf8)
    let now: Int64 = 1_700_000_015  // inside step 56_666_667

    func code(at step: Int64, _ p: OTPParameters = .default) throws -> [UInt8] {
        try TOTP.code(secret: secret, parameters: p, at: step * Int64(p.period))
    }

    /// With a fixed clock, codes at T±N pass (and report their step) and T±(N+1) fail.
    func testEdgesForN0_1_5_10() throws {
        let key = HMACKey(algorithm: .sha1, key: secret)
        let t = now / 30
        for n in [0, 1, 5, 10] {
            let v = try TOTPVerifier(adjacentIntervals: n)
            for offset in [-n, n] {
                let step = try v.verify(answer: try code(at: t + Int64(offset)), key: key, parameters: .default, at: now)
                XCTAssertEqual(step, UInt64(t + Int64(offset)), "N=\(n) offset \(offset) must pass")
            }
            for offset in [-(n + 1), n + 1] {
                let c = try code(at: t + Int64(offset))
                // Guard against a chance collision with a code inside the window.
                let inside = try (-n...n).map { try code(at: t + Int64($0)) }
                if inside.contains(c) { continue }
                XCTAssertNil(try v.verify(answer: c, key: key, parameters: .default, at: now), "N=\(n) offset \(offset) must fail")
            }
        }
        XCTAssertThrowsError(try TOTPVerifier(adjacentIntervals: 11))
        XCTAssertThrowsError(try TOTPVerifier(adjacentIntervals: -1))
    }

    func testReplayGuardExcludesUsedSteps() throws {
        let key = HMACKey(algorithm: .sha1, key: secret)
        let v = try TOTPVerifier(adjacentIntervals: 1)
        let t = UInt64(now / 30)
        let c = try code(at: Int64(t))
        XCTAssertEqual(try v.verify(answer: c, key: key, parameters: .default, at: now, usedUpTo: t - 1), t)
        XCTAssertNil(try v.verify(answer: c, key: key, parameters: .default, at: now, usedUpTo: t))
    }

    func testMalformedAnswersNeverMatch() throws {
        let key = HMACKey(algorithm: .sha1, key: secret)
        let v = try TOTPVerifier()
        let good = try code(at: now / 30)
        XCTAssertNotNil(try v.verify(answer: good, key: key, parameters: .default, at: now))
        let bad: [[UInt8]] = [[], good + [0x30], Array(good.dropLast()), [0x20] + good.dropLast(),
                              Array(good.prefix(3)) + [0] + Array(good.suffix(2)),
                              Array("abcdef".utf8), Array("-12345".utf8), Array("+12345".utf8),
                              [UInt8](repeating: 0x39, count: 10_240)]
        for b in bad {
            XCTAssertNil(try v.verify(answer: b, key: key, parameters: .default, at: now), "\(b.prefix(12))")
        }
    }

    func testNearEpochDoesNotUnderflow() throws {
        let key = HMACKey(algorithm: .sha1, key: secret)
        let v = try TOTPVerifier(adjacentIntervals: 10)
        let c = try code(at: 0)
        XCTAssertEqual(try v.verify(answer: c, key: key, parameters: .default, at: 5), 0)
    }
}
