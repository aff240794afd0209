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
    let hint = hints.sent[choice]
    var why: Message = "could not send a code: use your app or a recovery code"
    switch store.send(user: user, label: hint.label, service: serviceName(pamh), options: options) {
    case .sent(let fresh, let sentAt, _, let masked):
        log(pamh, LOG_INFO, (fresh ? "sent a code to user " : "asked user ") + printable(user) + (fresh ? " (factor " : " again for the code sent (factor ")
            + printable(hint.label) + ", " + printable(masked) + ")")
        var question = literal("Code sent to ") + printable(masked).bytes
        if !fresh { question += literal(" at ") + ModuleOptions.utcText(sentAt) }
        return prompt(pamh, Message(question + literal(": ")))
    case .notSent(let message):
        why = message
        log(pamh, LOG_NOTICE, "no code sent to user " + printable(user) + " (factor " + printable(hint.label) + "): " + message)
    case .outcome(.failed(let error)):
        log(pamh, LOG_ERR, "no code sent to user " + printable(user) + " (factor " + printable(hint.label) + "): " + describe(error))
    default:
        log(pamh, LOG_ERR, "no code sent to user " + printable(user) + ": unexpected reply from pam-totpd")
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
    (h.kind == .sms ? literal("text message to ") : literal("email to ")) + printable(h.masked).bytes
}
