import XCTest
import TestSupport
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

/// Clock drift (TOTPVerifier, "Clock drift"; docs/ARCHITECTURE.md, section 4.17) with an injected clock:
/// learned inside the window, bounded, stored with the used step, the window centred on it and
/// never wider than adjacent_intervals.
final class DriftTests: XCTestCase {
    let secret = Array("12345678901234567890".utf8)
    let label = Array("phone".utf8)
    let t0: Int64 = 1_800_000_010  // 10 s into a step
    var record: UserRecord!
    var options = ModuleOptions()

    override func setUpWithError() throws {
        record = UserRecord(factors: [try Factor(label: label, parameters: .default, created: 1, secret: secret)])
    }

    /// The code of the device whose clock is `offset` steps ahead of the host at host time `t`.
    func deviceCode(_ offset: Int64, at t: Int64) throws -> [UInt8] {
        try TOTP.code(secret: secret, parameters: .default, at: t + offset * 30)
    }

    func decide(_ state: inout UserState, _ answer: [UInt8], at t: Int64) throws -> AuthOutcome {
        let d = try Authenticator.decide(record: record, state: state, answer: answer, at: t,
                                         verifier: try TOTPVerifier(adjacentIntervals: options.adjacentIntervals),
                                         options: options)
        if let next = d.state { state = next }
        return d.outcome
    }

    func testDriftIsLearnedStoredAndFollowedWithinItsBound() throws {
        var state = UserState()
        var t = t0
        // A device 3 steps ahead: inside the ±5 window; learned (a jump from 0: logged).
        XCTAssertEqual(try decide(&state, try deviceCode(3, at: t), at: t),
                       .success(factor: label, step: UInt64(t / 30 + 3), digits: 6, driftJump: DriftJump(from: 0, to: 3)))
        XCTAssertEqual(state.drift(forLabel: label), 3)
        // It wanders to 7 steps ahead: outside ±5 of the host, inside ±5 of the learned +3.
        t += 600
        XCTAssertEqual(try decide(&state, try deviceCode(7, at: t), at: t),
                       .success(factor: label, step: UInt64(t / 30 + 7), digits: 6, driftJump: nil))
        XCTAssertEqual(state.drift(forLabel: label), 5, "bounded to ±adjacent_intervals")
        // 10 ahead: the window is now [host, host+10].
        t += 600
        guard case .success = try decide(&state, try deviceCode(10, at: t), at: t) else { return XCTFail("+10 within the window") }
        XCTAssertEqual(state.drift(forLabel: label), 5)
        // 11 ahead: never accepted (2N+1 steps centred on +5 reach +10 at most).
        t += 600
        guard case .wrongCode = try decide(&state, try deviceCode(11, at: t), at: t) else { return XCTFail("+11 accepted") }
        // The window moved with the drift: 1 step behind the host is now outside it.
        guard case .wrongCode = try decide(&state, try deviceCode(-1, at: t), at: t) else { return XCTFail("-1 accepted") }
        // The device corrects its clock (NTP): 0 is still inside, and the drift follows back (a jump).
        XCTAssertEqual(try decide(&state, try deviceCode(0, at: t), at: t),
                       .success(factor: label, step: UInt64(t / 30), digits: 6, driftJump: DriftJump(from: 5, to: 0)))
        XCTAssertEqual(state.drift(forLabel: label), 0)
    }

    func testWithoutAdjacentIntervalsNothingIsLearned() throws {
        options.adjacentIntervals = 0
        var state = UserState()
        var stored = UserState()
        stored.setLastStep(1, forLabel: label, drift: 4)  // learned under a wider window earlier
        state = stored
        guard case .wrongCode = try decide(&state, try deviceCode(4, at: t0), at: t0) else { return XCTFail("+4 with a window of 0") }
        XCTAssertEqual(try decide(&state, try deviceCode(0, at: t0 + 30), at: t0 + 30),
                       .success(factor: label, step: UInt64((t0 + 30) / 30), digits: 6, driftJump: DriftJump(from: 0, to: 0)).withoutJump)
        XCTAssertEqual(state.drift(forLabel: label), 0)
    }

    func testAStoredDriftBeyondTheWindowIsBoundedWhenUsed() throws {
        options.adjacentIntervals = 2
        var state = UserState()
        state.setLastStep(1, forLabel: label, drift: 9)  // learned when the window was ±10
        // Centred on +2 (bounded), so +4 is the edge and +5 is out.
        guard case .success = try decide(&state, try deviceCode(4, at: t0), at: t0) else { return XCTFail("+4") }
        XCTAssertEqual(state.drift(forLabel: label), 2)
        guard case .wrongCode = try decide(&state, try deviceCode(5, at: t0 + 300), at: t0 + 300) else { return XCTFail("+5") }
    }

    func testTheWindowIsAlwaysTwoNPlusOneSteps() throws {
        let key = HMACKey(algorithm: .sha1, key: secret)
        let v = try TOTPVerifier(adjacentIntervals: 3)
        for drift in [-9, -3, -1, 0, 2, 3, 7] as [Int64] {
            var accepted: [Int64] = []
            for offset in -12...12 as ClosedRange<Int64> {
                let code = try deviceCode(offset, at: t0)
                if try v.match(answer: code, key: key, parameters: .default, at: t0, usedUpTo: nil, drift: drift).step != nil {
                    accepted.append(offset)
                }
            }
            let centre = max(-3, min(3, drift))
            XCTAssertEqual(accepted, Array((centre - 3)...(centre + 3)), "drift \(drift)")
        }
    }

    func testDriftIsKeptInTheStateFileAndOlderFilesReadAsNone() throws {
        var s = UserState()
        s.setLastStep(100, forLabel: label, drift: -4)
        s.setLastStep(200, forLabel: Array("tablet".utf8), drift: 7)
        let slot = s.slotBytes()
        let back = try XCTUnwrap(UserState.parse(slot: slot[...]))
        XCTAssertEqual(back, s)
        XCTAssertEqual(back.drift(forLabel: label), -4)
        // The step is kept by setLastStep without a drift.
        var kept = back
        kept.setLastStep(101, forLabel: label)
        XCTAssertEqual(kept.drift(forLabel: label), -4)
        // A slot written before drift was learned had zero in the entry's third word.
        var old = slot
        for i in 0..<8 { old[UserState.headerSize + 16 + i] = 0 }
        for i in 0..<8 { old[UserState.headerSize + UserState.entrySize + 16 + i] = 0 }
        let end = UserState.headerSize + 2 * UserState.entrySize
        storeLE(&old, UserState.slotSize - 8, fnv1a64(old[0..<end]), 8)
        let parsed = try XCTUnwrap(UserState.parse(slot: old[...]))
        XCTAssertEqual(parsed.lastStep(forLabel: label), 100)
        XCTAssertEqual(parsed.drift(forLabel: label), 0)
        // A drift beyond any window (a hand-made slot) reads as none.
        var wild = slot
        storeLE(&wild, UserState.headerSize + 16, UInt64(bitPattern: Int64(1_000)), 8)
        storeLE(&wild, UserState.slotSize - 8, fnv1a64(wild[0..<end]), 8)
        XCTAssertEqual(try XCTUnwrap(UserState.parse(slot: wild[...])).drift(forLabel: label), 0)
    }
}

extension AuthOutcome {
    /// The same success without a drift jump (for expectations where none is due).
    var withoutJump: AuthOutcome {
        if case .success(let f, let s, let d, _) = self { return .success(factor: f, step: s, digits: d) }
        return self
    }
}
