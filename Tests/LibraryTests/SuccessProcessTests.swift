import Foundation
import XCTest
import TestSupport
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

/// totp-enroll's Proof skips its own code check when the state grew (sequence) and the state's
/// `successProcess` is its own pid: "the PAM stack already accepted a code in this process".
/// That inference only holds if `successProcess` names the process whose code was accepted BY
/// THE LATEST WRITE. Today a failed attempt keeps the previous success's pid and still bumps the
/// sequence, so an attacker with the user's password (and a shell as the user) can:
///   1. note the pid P of the user's last successful pam_totp login (ps; sshd [priv], su, sudo),
///   2. after it exits, cycle pids until their `totp-enroll recovery-codes` runs as pid P,
///   3. at its password prompt, fail one pam_totp login for the user (su/ssh, wrong code),
///   4. enter the password: `after.sequence > before.sequence && after.successProcess == P`,
///      no code is asked, and new recovery codes are printed (full second factor).
/// Reproduced end to end with the shipped pam.d/totp-enroll (pam_unix only); see the review report.
final class SuccessProcessTests: XCTestCase {
    let secret = Array("12345678901234567890".utf8)
    let t0: Int64 = 1_800_000_010

    func testAFailedAttemptDoesNotKeepTheLastSuccessfulProcess() throws {
        let record = UserRecord(uid: 1000, id: 0x1234, factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret),
        ])
        let verifier = try TOTPVerifier()
        let options = ModuleOptions()
        let victimPID: UInt32 = 31559

        // The user's own login: accepted, recorded with its process id.
        let ok = try Authenticator.decide(record: record, state: UserState(),
                                          answer: try TOTP.code(secret: secret, parameters: .default, at: t0),
                                          at: t0, verifier: verifier, options: options, process: victimPID)
        guard case .success = ok.outcome, var state = ok.state else { return XCTFail("the right code must work") }
        state.sequence = 1  // as written
        XCTAssertEqual(state.successProcess, victimPID)

        // Later, another process fails (wrong code): the state is written again (sequence + 1).
        let bad = try Authenticator.decide(record: record, state: state, answer: Array("000000".utf8),
                                           at: t0 + 60, verifier: verifier, options: options, process: 40000)
        guard case .wrongCode = bad.outcome, var after = bad.state else { return XCTFail("a wrong code is a counted failure") }
        after.sequence = state.sequence &+ 1

        // What Proof concludes for a totp-enroll that now runs as pid `victimPID`:
        let proofSkipsTheCode = after.sequence > state.sequence && after.successProcess == victimPID
        XCTAssertFalse(proofSkipsTheCode,
                       "a failed attempt left successProcess = \(after.successProcess) (the earlier success's pid): "
                       + "a process that reuses that pid passes totp-enroll's code check with the password alone")
    }
}
