import CLibc
import CPAM
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

// The first question when codes can be sent to the user (text message, email): the login flow
// in Module.swift asks it instead of the plain prompt and goes on with the answer it returns,
// so a sent code is checked by the same `authenticate` as any other. Only pam-totpd sends.

/// Lists the factors a code can be sent to (name and masked destination), asks for a typed
/// code or the one to send to (Enter: the first), asks pam-totpd to send, and asks for the code
/// sent. A user whose only factor is one phone or address gets the code at once. Returns the
/// answer to check; nil when the conversation failed. A code that cannot be sent is told, and a
/// user with an app or recovery codes is then asked for one of those; anyone else is denied
/// with nothing counted against them (`notSent`: the module returns PAM_AUTH_ERR).
@_optimize(size)  // cold: a login with a phone or address only
func firstAnswer(_ pamh: OpaquePointer, _ store: LoginStore, user: [UInt8], options: ModuleOptions, hints: FactorHints,
                 notSent: inout Bool) -> [UInt8]? {
    var choice = 0
    if hints.typed || hints.sent.count > 1 {
        var lines: [[UInt8]] = [literal("A code can be sent to you:")]
        for (i, h) in hints.sent.enumerated() {
            lines.append(literal("  ") + [0x31 &+ UInt8(truncatingIfNeeded: i)] + literal("  ") + destination(h) + literal(" (")
                         + printable(h.label).bytes + [0x29])
        }
        guard showInfo(pamh, lines) else { return nil }
        // (Here the user types codes too, or has several destinations: one alone was sent at once.)
        let question: [UInt8] = hints.sent.count == 1
            ? literal("Verification code (Enter: ") + destination(hints.sent[0]) + literal("): ")
            : (hints.typed ? literal("Verification code, or ") : literal("Send a code to ")) + literal("1-")
                + [0x30 &+ UInt8(truncatingIfNeeded: hints.sent.count)] + literal(" (Enter: 1): ")
        guard let answer = prompt(pamh, Message(question)) else { return nil }
        if answer.count == 1, let d = answer.first, d >= 0x31, Int(d - 0x30) <= hints.sent.count {
            choice = Int(d - 0x31)
        } else if !answer.isEmpty {
            return answer  // a typed code (or one sent earlier): checked like any other
        }
    }
    var why: Message = "could not send a code: use your app or a recovery code"
    if let sent = sendCode(pamh, store, user: user, hint: hints.sent[choice], options: options, why: &why) {
        return prompt(pamh, Message(sent + literal(": ")))
    }
    // A user with nothing else to type is told what is left to do.
    guard showInfo(pamh, hints.typed ? [printable(why.bytes).bytes]
                                     : [printable(why.bytes).bytes, literal("Try again later, or ask your administrator.")]) else { return nil }
    if hints.typed { return prompt(pamh, Message(options.prompt)) }
    notSent = true
    return []
}

/// "text message to +1******1234", "email to a***@example.com".
@_optimize(size)  // cold: a login with a phone or address only
func destination(_ h: FactorHint) -> [UInt8] {
    Array(bytes(h.kind.channel?.promptLead ?? "code to ")) + printable(h.masked).bytes
}

/// Asks pam-totpd to send a code to `hint` (the limits, and a live code within
/// `oob_resend_interval` asked for again rather than sent, are its store's) and logs what came
/// of it. Returns "Code sent to +1******1234" (" at TIME" for the code sent earlier); nil when
/// nothing was sent, with `why` set for the user when pam-totpd said why.
@_optimize(size)  // cold: a login with a phone or address only
func sendCode(_ pamh: OpaquePointer, _ store: LoginStore, user: [UInt8], hint: FactorHint, options: ModuleOptions,
              why: inout Message) -> [UInt8]? {
    switch store.send(user: user, label: hint.label, service: serviceName(pamh), options: options) {
    case .sent(let fresh, let sentAt, _, let masked):
        log(pamh, LOG_INFO, (fresh ? "sent a code to user " : "asked user ") + printable(user) + (fresh ? " (factor " : " again for the code sent (factor ")
            + printable(hint.label) + ", " + printable(masked) + ")")
        var text = literal("Code sent to ") + printable(masked).bytes
        if !fresh { text += literal(" at ") + ModuleOptions.utcText(sentAt) }
        return text
    case .notSent(let message):
        why = message
        log(pamh, LOG_NOTICE, "no code sent to user " + printable(user) + " (factor " + printable(hint.label) + "): " + message)
    case .outcome(.failed(let error)):
        log(pamh, LOG_ERR, "no code sent to user " + printable(user) + " (factor " + printable(hint.label) + "): " + describe(error))
    default:
        log(pamh, LOG_ERR, "no code sent to user " + printable(user) + ": unexpected reply from pam-totpd")
    }
    return nil
}

// A one-prompt stack (forward_pass) for a user whose only factors are sent codes, with pam_totp
// on both sides of the password module (pam_totp(8), "SCREEN LOCKERS AND DESKTOPS"):
//
//   auth [success=ok ignore=ignore cred_insufficient=bad default=die] pam_totp.so forward_pass nullok
//   auth requisite pam_unix.so use_first_pass
//   auth required  pam_totp.so forward_pass after_password
//
// Without a live code, the forward_pass line hands the whole answer on as the password and
// returns PAM_CRED_INSUFFICIENT (`bad`: the stack goes on but cannot succeed), leaving
// that code in the handle (OneVerdict.swift: for this key, this pam_authenticate only).
// The after_password line runs only if the password was right (requisite): it sends the code
// and fails; at the next attempt the forward_pass line checks the code like any other and the
// after_password line lets an accepted code through. A wrong password sends nothing.
// PAM_CRED_INSUFFICIENT is returned for nothing else, so a stack can tell it from a wrong code.

/// forward_pass, a user with only sent codes and none live: the whole answer is PAM_AUTHTOK.
@_optimize(size)  // cold: a one-prompt login with a phone or address only
func passwordFirst(_ pamh: OpaquePointer, _ answer: [UInt8], user: [UInt8]) -> Int32 {
    forwardPassword(pamh, answer, codeLength: 0)
    log(pamh, LOG_INFO, "user " + printable(user) + " has only sent codes, none live: a code is sent after the password (after_password)")
    return PAM_CRED_INSUFFICIENT
}

/// The after_password line: asks nothing. After the forward_pass line's PAM_CRED_INSUFFICIENT
/// it sends the code (as the two-prompt path does), says where, and returns PAM_AUTH_ERR; any
/// other code that line left for this user in this pam_authenticate (accepted, ignored under
/// nullok or exempt, denied) is returned as it is (OneVerdict.swift); none (no forward_pass
/// line, another user, another store or socket) is a misconfigured stack: PAM_AUTH_ERR.
@_optimize(size)  // cold: a one-prompt login with a phone or address only
func afterPassword(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions, key: (key: [UInt8], base: Int)) -> Int32 {
    guard options.forwardPass else {
        log(pamh, LOG_ERR, "after_password needs forward_pass on the same line (pam_totp(8))")
        return PAM_SERVICE_ERR
    }
    switch verdictLeft(pamh, key: key, any: true) {
    case PAM_CRED_INSUFFICIENT?:
        break  // send the code, below
    case PAM_IGNORE? where hasDeferredCode(pamh, key: key):
        return checkDeferred(pamh, user: user, options: options, key: key)
    case let code?:
        return code  // accepted, ignored (nullok, exempt) or denied before the password module
    case nil:
        log(pamh, LOG_ERR, "denied user " + printable(user) + ": after_password, but no forward_pass line before it decided for this user "
            + "(misconfigured stack: pam_totp(8))")
        return PAM_AUTH_ERR
    }
    let store = LoginStore.open(pamh, user: user, options: options)
    guard case .enrolled(let hints) = store.enrolment(user: user, options: options, mayMatter: true), let hint = hints.sent.first else {
        log(pamh, LOG_ERR, "no code sent to user " + printable(user) + ": no factor to send to")
        return PAM_AUTH_ERR
    }
    var why: Message = "could not send a code"
    if let sent = sendCode(pamh, store, user: user, hint: hint, options: options, why: &why) {
        _ = showInfo(pamh, [sent + literal(": type your password followed by the code")])
    } else {
        _ = showInfo(pamh, [printable(why.bytes).bytes, literal("Try again later, or ask your administrator.")])
    }
    return PAM_AUTH_ERR
}

// A one-field stack where a stranger can neither lock a user out nor spend their code
// (pam_totp(8), "VPN AND RADIUS"):
//
//   auth [success=ok ignore=ignore cred_insufficient=bad default=die] pam_totp.so forward_pass code_after_password nullok
//   auth requisite pam_unix.so use_first_pass
//   auth required  pam_totp.so forward_pass after_password
//
// The first line splits the answer (the code is as long as the user's first TOTP or HOTP
// factor's, or the live sent code's), hands the password on, keeps the code in the handle and
// returns PAM_IGNORE: it counts nothing. Only if the password passed (requisite) does the
// after_password line check the code — counted, spent and logged as on any line.

/// The after_password line after a code_after_password line: checks the code it kept. The
/// handle's copy is replaced by this line's verdict (later lines are bound by it).
@_optimize(size)  // cold: one-field stacks only
func checkDeferred(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions, key: (key: [UInt8], base: Int)) -> Int32 {
    guard var code = deferredCode(pamh, key: key) else { return PAM_AUTH_ERR }
    defer { wipe(&code) }
    // The password was handed on by the first line: nothing more goes on from here.
    let result = checkAnswer(pamh, LoginStore.open(pamh, user: user, options: options), user: user, answer: code, options: options,
                             handOn: false)
    if !rememberVerdict(pamh, key: key, code: result) { forgetVerdict(pamh) }
    return result
}
