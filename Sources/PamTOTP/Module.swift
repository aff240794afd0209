import CLibc
import CPAM
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem

// The exported C ABI: pam_sm_authenticate and pam_sm_setcred only (exports.map hides the rest).

/// The delay libpam applies after a failed authentication (it takes the longest any module
/// asked for, randomised by ±25%): 2 s, like pam_unix.
let failDelayMicroseconds: UInt32 = 2_000_000

@_cdecl("pam_sm_authenticate")
public func pam_sm_authenticate(_ pamh: OpaquePointer?, _ flags: Int32, _ argc: Int32,
                                _ argv: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    guard let pamh else { return PAM_SERVICE_ERR }
    _ = pam_fail_delay(pamh, failDelayMicroseconds)
    // Marks this pam_authenticate, or finds it marked by an earlier line (OneVerdict.swift).
    beginPass(pamh)
    let options: ModuleOptions
    // The user's groups are looked up only if the configuration has [group NAME] sections,
    // once per login (Groups.swift).
    var groups: UserGroups? = nil
    do throws(MFAError) {
        options = try ModuleOptions.load(arguments(argc, argv), service: serviceName(pamh)) { (group) throws(MFAError) -> Bool in
            if groups == nil {
                guard let user = userName(pamh) else { throw .invalidUserName }
                groups = try UserGroups(user: user)
            }
            return try groups?.contains(group) ?? false
        }
    } catch {
        if case .invalidUserName = error {
            log(pamh, LOG_ERR, "cannot determine the user name")
            return PAM_USER_UNKNOWN
        }
        return finish(pamh, .failed(error), user: [], debug: true)
    }
    guard let user = userName(pamh) else {
        log(pamh, LOG_ERR, "cannot determine the user name")
        return PAM_USER_UNKNOWN
    }
    if options.codeAfterPassword && (!options.forwardPass || options.afterPassword) {
        log(pamh, LOG_ERR, "code_after_password needs forward_pass, and not after_password, on the same line (pam_totp(8))")
        return PAM_SERVICE_ERR
    }
    let key = verdictKey(pamh, user: user, options: options)
    // A one-prompt stack's line after the password module: it asks nothing, it completes what
    // the forward_pass line before it left (OutOfBand.swift).
    if options.afterPassword { return afterPassword(pamh, user: user, options: options, key: key) }
    // A line before this one in the same pam_authenticate decided for this user: its code,
    // unasked (OneVerdict.swift).
    if let code = verdictLeft(pamh, key: key) {
        if code == PAM_AUTH_ERR && hasDeferredCode(pamh, key: key) { return lineInTheSplit(pamh, user: user) }
        return earlierVerdict(pamh, code, user: user, options: options)
    }
    // Exempt by a section of the configuration file: PAM_IGNORE, never PAM_SUCCESS (the line
    // does not count; the rest of the stack decides). Logged every time.
    switch options.exempt ? exempted(pamh, user: user, options: options) : verify(pamh, user: user, options: options, key: key) {
    case .notAsked:
        return PAM_IGNORE
    case .decided(let code):
        _ = rememberVerdict(pamh, key: key, code: code)
        return code
    case .deferred(let code):
        return code  // kept in the handle by the line itself, with the code (deferCode)
    }
}

/// Asks for and checks a code of `user`: one sequence — look-up, enrolment at first login,
/// nullok, prompt, verdict, forward_pass, log — over the store chosen at the start
/// (LoginStore: the file store in process as root, else pam-totpd).
func verify(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions, key: (key: [UInt8], base: Int)) -> LineDecision {
    let store = LoginStore.open(pamh, user: user, options: options)
    // Only an unenrolled user under nullok (without forward_pass) is not asked. Everyone else,
    // enrolled or not, locked out or not, sees the same prompt (no account enumeration).
    let skippable = options.nullok && !options.forwardPass
    // Enrolment at first login may be offered (a root caller, before its last day): an unenrolled user is told so.
    let offersEnrolment = options.enrollAtLoginUntil != nil && store.offersEnrolment(options)
    var unenrolled = false
    var hints = FactorHints()
    // code_after_password: the code's length is needed before the password is handed on.
    switch store.enrolment(user: user, options: options, mayMatter: skippable || offersEnrolment || options.codeAfterPassword) {
    case .enrolled(let offered): hints = offered
    case .unknown: break
    case .unenrolled: unenrolled = true
    case .decided(let outcome): return .decided(finish(pamh, outcome, user: user, debug: options.debug))
    case .refused(let why): return .decided(refusedBeforePrompt(pamh, user: user, why, options: options))
    }
    // Enrolment at first login, where policy offers it (the deadline; sections bound it to groups).
    if unenrolled, offersEnrolment, let until = options.enrollAtLoginUntil,
       let code = enrolAtLogin(pamh, store, user: user, options: options, until: until) {
        return .decided(code)
    }
    if unenrolled && skippable { _ = ignored(pamh, user: user, options: options); return .notAsked }
    // Every factor of a kind the policy does not allow here (factor_kinds): nothing to ask.
    if !hints.typed && hints.sent.isEmpty && hints.disallowed > 0 { return .decided(noneAllowed(pamh, user: user, options: options)) }
    // Factors a code can be sent to: the first question offers them (OutOfBand.swift).
    var notSent = false
    let first = hints.sent.isEmpty || options.forwardPass
        ? prompt(pamh, Message(options.prompt)) : firstAnswer(pamh, store, user: user, options: options, hints: hints, notSent: &notSent)
    guard var answer = first else {
        log(pamh, LOG_ERR, "conversation failed for user " + printable(user))
        return .decided(PAM_CONV_ERR)
    }
    defer { wipe(&answer) }
    if notSent { return .decided(PAM_AUTH_ERR) }  // told and logged; nothing counted against the user
    // forward_pass under nullok for a user without a factor: the whole answer is the password.
    if unenrolled && options.nullok {
        forwardPassword(pamh, answer, codeLength: 0)
        return .decided(ignored(pamh, user: user, options: options))
    }
    // forward_pass for a user with only sent codes and none live: the whole answer is the
    // password, and the code is sent after the password module (`after_password`).
    if options.forwardPass && !hints.device && !hints.pending && !hints.sent.isEmpty {
        return .decided(passwordFirst(pamh, answer, user: user))
    }
    // code_after_password: the password handed on, the code kept for the after_password line
    // (an un-enrolled user without nullok too: denied there, after the password, like anyone).
    if options.codeAfterPassword {
        let digits = unenrolled ? 6 : hints.codeDigits
        forwardPassword(pamh, answer, codeLength: digits)
        return .deferred(deferCode(pamh, answer.suffix(digits), user: user, key: key))
    }
    return .decided(checkAnswer(pamh, store, user: user, answer: answer, options: options, handOn: options.forwardPass))
}

/// Checks `answer` (counted, spent, logged) and returns the PAM code. `handOn` (forward_pass):
/// the answer less the code goes on as PAM_AUTHTOK whatever the verdict — less as many digits
/// as an accepted code had, the whole of it for an un-enrolled user under nullok, else less six
/// (a refusal by pam-totpd too: the next module does its usual work, this line denies and says why).
func checkAnswer(_ pamh: OpaquePointer, _ store: LoginStore, user: [UInt8], answer: [UInt8], options: ModuleOptions,
                 handOn: Bool) -> Int32 {
    var verdict = store.authenticate(user: user, answer: answer, previous: nil, options: options)
    if case .outcome(.resyncNeeded) = verdict {
        guard let resynced = resync(pamh, store, user: user, answer: answer, first: verdict, options: options) else { return PAM_CONV_ERR }
        verdict = resynced
    }
    switch verdict {
    case .refused(let why):
        if handOn { forwardPassword(pamh, answer, codeLength: 6) }
        return refused(pamh, user: user, why)
    case .outcome(.unenrolled) where options.nullok:
        if handOn { forwardPassword(pamh, answer, codeLength: 0) }
        return ignored(pamh, user: user, options: options)
    case .outcome(let outcome):
        if handOn { forwardPassword(pamh, answer, codeLength: codeLength(outcome)) }
        return finish(pamh, outcome, user: user, debug: options.debug)
    }
}

/// Every factor of the user is of a kind the policy does not allow here: told, and denied.
@_optimize(size)  // cold: factor_kinds narrower than the user's factors
func noneAllowed(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions) -> Int32 {
    log(pamh, LOG_WARNING, "denied user " + printable(user) + ": none of their factors is of a kind offered here ("
        + Message(ModuleOptions.kindNames(options.offeredKinds)) + "; factor_kinds, and a sent kind only with its sms_command or email_command)")
    _ = showInfo(pamh, [literal("None of your factors may be used here.")])
    return PAM_AUTH_ERR
}

/// A token's code past its window: the next press's code, in this login, resyncs it. nil: the
/// conversation failed.
@_optimize(size)  // cold: a token pressed past its window
func resync(_ pamh: OpaquePointer, _ store: LoginStore, user: [UInt8], answer: [UInt8], first: LoginStore.Verdict,
            options: ModuleOptions) -> LoginStore.Verdict? {
    log(pamh, LOG_NOTICE, "code of user " + printable(user) + " is past its token's window (a failure): asking for the next one to resync")
    guard var next = prompt(pamh, "Token out of sync: press its button again and enter the new code: ") else {
        log(pamh, LOG_ERR, "conversation failed for user " + printable(user))
        return nil
    }
    defer { wipe(&next) }
    // The same answer again (a conversation that answers every hidden prompt with one string, as
    // sshd's password authentication does) is the same attempt: not a second failure, and no resync.
    if constantTimeEqual(next, answer) { return first }
    return store.authenticate(user: user, answer: next, previous: answer, options: options)
}

/// The most digits a code has (OTPParameters): with forward_pass, what is sent to pam-totpd.
let maxCodeDigits = 8

/// forward_pass: the digits the code took off the end of the answer. An accepted code says
/// how many; otherwise six (the common length), so the next module still does its usual work.
func codeLength(_ outcome: AuthOutcome) -> Int {
    if case .success(_, _, let digits, _) = outcome { return digits }
    return 6
}

/// forward_pass: everything but the code becomes PAM_AUTHTOK for the next module
/// (`pam_unix.so use_first_pass`).
func forwardPassword(_ pamh: OpaquePointer, _ answer: [UInt8], codeLength: Int) {
    var password = Array(answer.dropLast(min(max(codeLength, 0), answer.count)))
    _ = withCString(Message(password)) { pam_set_item(pamh, PAM_AUTHTOK, UnsafeRawPointer($0)) }
    wipe(&password)
}

func ignored(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions) -> Int32 {
    if options.debug { log(pamh, LOG_DEBUG, "user " + printable(user) + " has no factor; nullok") }
    return PAM_IGNORE
}

/// A user exempt by policy: not asked for a code (the next line decides). With forward_pass the
/// one question is still asked and the whole answer is the password for the next module: that
/// PAM_IGNORE binds the later lines (OneVerdict.swift).
func exempted(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions) -> LineDecision {
    log(pamh, LOG_NOTICE, "user " + printable(user) + " is exempt (" + printable(options.exemptBy) + "): not asked for a code")
    guard options.forwardPass else { return .notAsked }
    guard var answer = prompt(pamh, Message(options.prompt)) else {
        log(pamh, LOG_ERR, "conversation failed for user " + printable(user))
        return .decided(PAM_CONV_ERR)
    }
    defer { wipe(&answer) }
    forwardPassword(pamh, answer, codeLength: 0)
    return .decided(PAM_IGNORE)
}

func refused(_ pamh: OpaquePointer, user: [UInt8], _ why: Message) -> Int32 {
    log(pamh, LOG_WARNING, "denied user " + printable(user) + ": pam-totpd refused: " + why)
    return PAM_AUTH_ERR
}

/// pam-totpd refused the look-up before the prompt. A forward_pass line still asks its one
/// question and hands the password part on (the next module does its usual work), then denies.
@_optimize(size)  // cold: a caller pam-totpd does not serve
func refusedBeforePrompt(_ pamh: OpaquePointer, user: [UInt8], _ why: Message, options: ModuleOptions) -> Int32 {
    if options.forwardPass, var answer = prompt(pamh, Message(options.prompt)) {
        forwardPassword(pamh, answer, codeLength: 6)
        wipe(&answer)
    }
    return refused(pamh, user: user, why)
}

/// A pam_totp line (not after_password) after a code_after_password line, before its
/// after_password line has checked the code: it cannot tell whether the password was checked,
/// so it denies (a stricter line there must not be skipped).
@_optimize(size)  // cold: a misconfigured stack
func lineInTheSplit(_ pamh: OpaquePointer, user: [UInt8]) -> Int32 {
    log(pamh, LOG_ERR, "denied user " + printable(user) + ": a pam_totp line between a code_after_password line and its "
        + "after_password line (misconfigured stack: pam_totp(8))")
    return PAM_AUTH_ERR
}

/// code_after_password: the code split off the answer waits in the handle for the
/// after_password line; this line decides nothing (PAM_IGNORE) and counts nothing.
@_optimize(size)  // cold: one-field stacks only
func deferCode(_ pamh: OpaquePointer, _ code: ArraySlice<UInt8>, user: [UInt8], key: (key: [UInt8], base: Int)) -> Int32 {
    guard rememberVerdict(pamh, key: key, code: PAM_IGNORE, deferred: code) else {
        // PAM_OLDAUTHTOK is another module's (OneVerdict.swift): nothing could carry the code.
        log(pamh, LOG_ERR, "denied user " + printable(user) + ": code_after_password cannot keep the code for the after_password line "
            + "(another module holds PAM_OLDAUTHTOK)")
        return PAM_AUTH_ERR
    }
    if code.count < 6 { log(pamh, LOG_INFO, "user " + printable(user) + ": the answer is shorter than a code") }
    return PAM_IGNORE
}

@_cdecl("pam_sm_setcred")
public func pam_sm_setcred(_ pamh: OpaquePointer?, _ flags: Int32, _ argc: Int32,
                           _ argv: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    if let pamh { forgetVerdict(pamh) }
    return PAM_SUCCESS
}

/// Logs the outcome (never a code or secret) and returns its PAM code (ErrorMapping.swift).
func finish(_ pamh: OpaquePointer, _ outcome: AuthOutcome, user: [UInt8], debug: Bool) -> Int32 {
    // Built only for the lines that use it: a success or a wrong code builds its line in one buffer.
    func who() -> Message { "user " + printable(user) }
    switch outcome {
    case .success(let factor, _, _, let jump):
        var line = LogLine()
        line.add("accepted code for user ")
        line.add(printable: user)
        line.add(" (factor ")
        line.add(printable: factor)
        line.add(")")
        line.send(pamh, LOG_INFO)
        if let jump {
            log(pamh, LOG_WARNING, "clock drift of " + who() + ", factor " + printable(factor) + ", jumped from "
                + signed(jump.from) + " to " + signed(jump.to) + " steps (check the device's clock)")
        }
    case .recoveryCode(let remaining):
        log(pamh, LOG_NOTICE, "accepted a recovery code for " + who() + " (" + decimal(remaining) + " left)")
    case .wrongCode(let replayed, let failures, let lockedUntil):
        var line = LogLine()
        line.add(replayed ? "replayed code for user " : "wrong code for user ")
        line.add(printable: user)
        line.add(" (")
        line.add(decimal: UInt64(failures))
        line.add(" consecutive failures)")
        if let lockedUntil {
            line.add("; locked out until ")
            line.add(message: Message(ModuleOptions.utcText(lockedUntil)))
        }
        if failures >= UserState.hardFailureCap { line.add("; locked until an admin runs totp-enroll unlock") }
        line.send(pamh, LOG_NOTICE)
    case .resyncNeeded:  // only if a store asked twice in one login: decide never does
        log(pamh, LOG_NOTICE, "denied " + who() + ": a resync was not finished")
    case .notRecorded(let error):
        // Denied like a wrong code, whatever the answer was: nothing about it is logged either.
        log(pamh, LOG_ERR, "denied " + who() + ": the attempt could not be recorded: " + describe(error))
    case .lockedOut(_, let permanent):
        log(pamh, LOG_WARNING, "denied " + who() + (permanent ? ": locked after too many failures (totp-enroll unlock)"
                                                   : ": temporarily locked out"))
    case .unenrolled:
        log(pamh, LOG_NOTICE, "denied " + who() + ": not enrolled (no record for this account)")
    case .failed(let error):
        log(pamh, LOG_ERR, "denied " + (user.isEmpty ? "" : who() + ": ") + describe(error))
    }
    return pamCode(outcome)
}
