import CLibc
import CPAM
import MFACore

// The exported C ABI: pam_sm_authenticate and pam_sm_setcred only (exports.map hides the rest).

@_cdecl("pam_sm_authenticate")
public func pam_sm_authenticate(_ pamh: OpaquePointer?, _ flags: Int32, _ argc: Int32,
                                _ argv: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    guard let pamh else { return PAM_SERVICE_ERR }
    let options: ModuleOptions
    do throws(MFAError) {
        options = try ModuleOptions.parse(arguments(argc, argv))
    } catch {
        return finish(pamh, .failed(error), user: [], debug: true)
    }
    guard let user = userName(pamh) else {
        log(pamh, LOG_ERR, "cannot determine the user name")
        return PAM_USER_UNKNOWN
    }
    let enrollment = Authenticator.lookup(user: user, options: options)
    if case .unenrolled = enrollment, options.nullok {
        if options.debug { log(pamh, LOG_DEBUG, "user " + printable(user) + " has no factor; nullok") }
        return PAM_IGNORE
    }
    guard var answer = prompt(pamh, "Verification code: ") else {
        log(pamh, LOG_ERR, "conversation failed for user " + printable(user))
        return PAM_CONV_ERR
    }
    let outcome = Authenticator.check(enrollment, answer: answer, at: Int64(time(nil)), options: options)
    wipe(&answer)
    return finish(pamh, outcome, user: user, debug: options.debug)
}

@_cdecl("pam_sm_setcred")
public func pam_sm_setcred(_ pamh: OpaquePointer?, _ flags: Int32, _ argc: Int32,
                           _ argv: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    PAM_SUCCESS
}

/// Logs the outcome and returns its PAM code (ErrorMapping.swift has the table).
func finish(_ pamh: OpaquePointer, _ outcome: AuthOutcome, user: [UInt8], debug: Bool) -> Int32 {
    let who = "user " + printable(user)
    switch outcome {
    case .success(let factor, _):
        log(pamh, LOG_INFO, "accepted code for " + who + " (factor " + printable(factor) + ")")
    case .wrongCode:
        log(pamh, LOG_NOTICE, "wrong code for " + who)
    case .unenrolled:
        log(pamh, LOG_NOTICE, "denied " + who + ": not enrolled")
    case .failed(let error):
        log(pamh, LOG_ERR, "denied " + (user.isEmpty ? "" : who + ": ") + describe(error))
    }
    return pamCode(outcome)
}
