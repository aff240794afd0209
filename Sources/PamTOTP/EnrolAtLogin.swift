import CLibc
import CPAM
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

// Enrolment at first login (`enroll_at_login=YYYY-MM-DD`, docs/ARCHITECTURE.md, section 5.5): a user
// with no factor, logging in as root-run services do (sshd, login, su, sudo), is shown a QR
// code, the key and the URI through the conversation and asked for a code; a valid one saves
// the factor (its step used) and the module succeeds; anything else saves nothing and fails.
// libqrencode is dlopen'ed only here (clibc_qr_encode), so every other login keeps its cost.

/// The PAM code of a first-login enrolment, or nil when none is offered (no such account, or
/// the store will not take a factor): the login then goes on as for any unenrolled user. Called
/// before the last day only (`verify`). `store`: the login's (LoginStore: in process as root,
/// or pam-totpd in fleet mode, which takes it from root callers only).
@_optimize(size)  // cold: not on a login's path
func enrolAtLogin(_ pamh: OpaquePointer, _ store: LoginStore, user: [UInt8], options: ModuleOptions, until: Int64) -> Int32? {
    let who = "user " + printable(user)
    guard let account = try? lookupAccount(user) else { return nil }
    var rng = SystemRandomNumberGenerator()
    var enrolment = LoginEnrolment(user: account.name, host: hostName(), using: &rng)
    defer { enrolment.wipeSecret() }
    do throws(MFAError) {
        guard try store.enrollAtLogin(account: account, label: enrolment.label, secret: [], answer: nil, options: options) == .mayEnrol else {
            throw .refusal(.enrolledMeanwhile)
        }
    } catch {
        log(pamh, LOG_WARNING, "enroll_at_login not offered to " + who + ": " + describe(error))
        return nil
    }
    log(pamh, LOG_NOTICE, "offering enrolment at login to " + who + " (enroll_at_login, until " + decimal(until) + ")")

    let shown = present(pamh, enrolment, until: until, who: who)
    guard shown, var answer = prompt(pamh, "Verification code from your app: ") else {
        log(pamh, LOG_ERR, "conversation failed during enrolment at login for " + who)
        return PAM_CONV_ERR
    }
    defer { wipe(&answer) }
    var code = answer.filter { $0 != 0x20 }
    defer { wipe(&code) }
    let result: FirstFactor
    do throws(MFAError) {
        result = try store.enrollAtLogin(account: account, label: enrolment.label, secret: enrolment.secret, answer: code, options: options)
    } catch {
        log(pamh, LOG_ERR, "enrolment at login for " + who + " failed, nothing saved: " + describe(error))
        return PAM_AUTH_ERR
    }
    switch result {
    case .enrolled:
        log(pamh, LOG_NOTICE, who + " enrolled factor " + printable(enrolment.label) + " at login (enroll_at_login)")
        _ = showInfo(pamh, [literal("Enrolled. From now on log in with a code from your app; run totp-enroll recovery-codes for recovery codes.")])
        return PAM_SUCCESS
    case .hadFactor:
        log(pamh, LOG_NOTICE, "enrolment at login for " + who + " added nothing: a factor was enrolled meanwhile")
        _ = showInfo(pamh, [literal("A factor was enrolled for you meanwhile (another login or totp-enroll): nothing was added. Log in with that one.")])
        return PAM_AUTH_ERR
    case .wrongCode, .mayEnrol:
        log(pamh, LOG_NOTICE, "enrolment at login for " + who + " failed: the code did not verify; nothing saved")
        return PAM_AUTH_ERR
    }
}

/// Shows the new factor through the conversation: what to do, the QR code (when libqrencode
/// loads), the key and the URI; every copy of the key is wiped after. False if the
/// conversation failed.
@_optimize(size)  // cold: not on a login's path
func present(_ pamh: OpaquePointer, _ enrolment: LoginEnrolment, until: Int64, who: Message) -> Bool {
    var text = Message("You have no verification-code factor yet. Until ") + Message(dayText(until - 1))
        + " (UTC) you can add one now: scan this QR code with an authenticator app"
        + " (or type the key), then type the code it shows."
    var lines: [[UInt8]] = [text.bytes]
    var uri = enrolment.uri.bytes
    var modules = [UInt8](repeating: 0, count: 177 * 177)
    let width = withCString(Message(uri)) { clibc_qr_encode($0, &modules, Int32(modules.count)) }
    if width > 0 {
        lines += LoginEnrolment.halfBlockLines(modules: modules, width: Int(width))
    } else {
        log(pamh, LOG_WARNING, "libqrencode.so.4 could not be loaded or failed: no QR code shown to " + who)
    }
    var key = enrolment.groupedKey
    lines.append(literal("Key: ") + key)
    lines.append(literal("URI: ") + uri)
    let shown = showInfo(pamh, lines)
    for i in lines.indices { wipe(&lines[i]) }
    wipe(&uri)
    wipe(&key)
    wipe(&modules)
    text = ""
    return shown
}

/// Shows `lines` as PAM_TEXT_INFO messages, several lines a message but each under libpam's
/// 512-byte limit (PAM_MAX_MSG_SIZE). False if the conversation failed.
func showInfo(_ pamh: OpaquePointer, _ lines: [[UInt8]]) -> Bool {
    var chunk: [UInt8] = []
    func flush() -> Bool {
        defer { wipe(&chunk) }
        if chunk.isEmpty { return true }
        return withCString(Message(chunk)) { cpam_info(pamh, $0) } == PAM_SUCCESS
    }
    for line in lines {
        let part = Array(line.prefix(500))
        if !chunk.isEmpty && chunk.count + 1 + part.count > 500 {
            guard flush() else { return false }
        }
        if !chunk.isEmpty { chunk.append(0x0A) }
        chunk += part
    }
    return flush()
}


/// "YYYY-MM-DD" of a Unix time (UTC).
func dayText(_ t: Int64) -> [UInt8] {
    let (year, month, day) = ModuleOptions.civilDay(t)
    func two(_ v: Int64) -> [UInt8] { [0x30 &+ UInt8(truncatingIfNeeded: (v / 10) % 10), 0x30 &+ UInt8(truncatingIfNeeded: v % 10)] }
    return decimal(year).bytes + [0x2D] + two(month) + [0x2D] + two(day)
}
