import CLibc
import CPAM
import MFACore

// The exported C ABI: pam_sm_authenticate and pam_sm_setcred only (exports.map hides the rest).

/// The delay libpam applies after a failed authentication (it takes the longest any module
/// asked for, randomised by ±25%): 2 s, like pam_unix.
let failDelayMicroseconds: UInt32 = 2_000_000

@_cdecl("pam_sm_authenticate")
public func pam_sm_authenticate(_ pamh: OpaquePointer?, _ flags: Int32, _ argc: Int32,
                                _ argv: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    guard let pamh else { return PAM_SERVICE_ERR }
    _ = pam_fail_delay(pamh, failDelayMicroseconds)
    let options: ModuleOptions
    do throws(MFAError) {
        options = try ModuleOptions.load(arguments(argc, argv))
    } catch {
        return finish(pamh, .failed(error), user: [], debug: true)
    }
    guard let user = userName(pamh) else {
        log(pamh, LOG_ERR, "cannot determine the user name")
        return PAM_USER_UNKNOWN
    }
    // Whether to ask at all: only an unenrolled user under nullok is not asked. Everyone else,
    // enrolled or not, locked out or not, sees the same prompt (no account enumeration).
    var account: UInt32? = nil  // for the log line below
    var login = Authenticator.lookup(user: user, options: options) { () throws(MFAError) -> Account? in
        let found = try lookupAccount(user)
        account = found?.uid
        return found
    }
    if case .otherAccount(let recordUID) = login.enrollment {
        log(pamh, LOG_WARNING, "the record of user " + printable(user) + " was enrolled for uid " + decimal(recordUID)
            + (account.map { ", not for this account's uid " + decimal($0) } ?? ", and no such account exists")
            + ": not enrolled (remove it with totp-enroll purge --user NAME)")
        login.enrollment = .unenrolled
    }
    if case .unenrolled = login.enrollment, options.nullok {
        if options.debug { log(pamh, LOG_DEBUG, "user " + printable(user) + " has no factor; nullok") }
        return PAM_IGNORE
    }
    guard var answer = prompt(pamh, Message(options.prompt)) else {
        log(pamh, LOG_ERR, "conversation failed for user " + printable(user))
        return PAM_CONV_ERR
    }
    let outcome = login.authenticate(answer: answer, at: Int64(time(nil)), options: options,
                                     process: UInt32(truncatingIfNeeded: getpid()))
    wipe(&answer)
    return finish(pamh, outcome, user: user, debug: options.debug)
}

@_cdecl("pam_sm_setcred")
public func pam_sm_setcred(_ pamh: OpaquePointer?, _ flags: Int32, _ argc: Int32,
                           _ argv: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    PAM_SUCCESS
}

/// Logs the outcome (never a code or secret) and returns its PAM code (ErrorMapping.swift).
func finish(_ pamh: OpaquePointer, _ outcome: AuthOutcome, user: [UInt8], debug: Bool) -> Int32 {
    let who = "user " + printable(user)
    switch outcome {
    case .success(let factor, _, _):
        log(pamh, LOG_INFO, "accepted code for " + who + " (factor " + printable(factor) + ")")
    case .recoveryCode(let remaining):
        log(pamh, LOG_NOTICE, "accepted a recovery code for " + who + " (" + decimal(remaining) + " left)")
    case .wrongCode(let replayed, let failures, let lockedUntil):
        var line = (replayed ? "replayed code for " : "wrong code for ") + who + " (" + decimal(failures)
            + " consecutive failures)"
        if lockedUntil != nil { line = line + "; locked out for a while" }
        if failures >= UserState.hardFailureCap { line = line + "; locked until an admin runs totp-enroll unlock" }
        log(pamh, LOG_NOTICE, line)
    case .notRecorded(let error):
        // Denied like a wrong code, whatever the answer was: nothing about it is logged either.
        log(pamh, LOG_ERR, "denied " + who + ": the attempt could not be recorded: " + describe(error))
    case .lockedOut(_, let permanent):
        log(pamh, LOG_WARNING, "denied " + who + (permanent ? ": locked after too many failures (totp-enroll unlock)"
                                                   : ": temporarily locked out"))
    case .unenrolled:
        log(pamh, LOG_NOTICE, "denied " + who + ": not enrolled (no record for this account)")
    case .failed(let error):
        log(pamh, LOG_ERR, "denied " + (user.isEmpty ? "" : who + ": ") + describe(error))
    }
    return pamCode(outcome)
}
