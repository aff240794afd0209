import MFACommandLine
import CLibc
import CPAM
import MFAImport
import MFAPamStacks
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// The set-uid model (docs/ARCHITECTURE.md, section 4.3). totp-enroll is installed set-uid root, like passwd: it
/// acts only for the real uid (`--user`/`--store` need real uid 0), clears the environment it
/// inherited, re-authenticates the caller through the PAM service `totp-enroll` before any
/// change, and writes caller-chosen files only from a child that has dropped privileges.
enum Privilege {
    /// True when running set-uid (or set-gid): the caller is not who we run as.
    static var elevated: Bool { geteuid() != getuid() || getegid() != getgid() }

    /// First thing in main: nothing the caller put in the environment may steer a privileged
    /// process (locale, PATH, terminal, malloc, ...). Files we create are private.
    static func sanitize() {
        if elevated {
            _ = clearenv()
            _ = setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin", 1)
        }
        _ = umask(0o077)
    }

    /// Drops to the real uid/gid for good (for work that never touches the store).
    static func dropPermanently() throws(CommandError) {
        guard elevated else { return }
        guard dropToCaller() else { throw CLIError("cannot drop privileges") }
    }

    /// Sets real, effective and saved ids to the caller's real uid and gid, without
    /// supplementary groups, and checks that the old effective ids cannot be taken back.
    /// Only syscalls, so a forked child may call it. True on success.
    static func dropToCaller() -> Bool {
        let uid = getuid(), gid = getgid(), euid = geteuid(), egid = getegid()
        _ = setgroups(0, nil)  // fails, harmlessly, unless we are root
        // Group first, while we may still change it.
        return setresgid(gid, gid, gid) == 0 && setresuid(uid, uid, uid) == 0
            && getuid() == uid && geteuid() == uid && getgid() == gid && getegid() == gid
            && (uid == 0 || ((euid == uid || seteuid(euid) != 0) && (egid == gid || setegid(egid) != 0)))
    }

    /// Re-authenticates the caller (not root) as `user` through the PAM service `totp-enroll`:
    /// the shipped service asks for the password, and for a current code when the user already
    /// has a factor (pam_totp with nullok). `code`, if given, answers the code prompt.
    static func reauthenticate(user: String, code: String?) throws(CommandError) {
        guard getuid() != 0 else { return }  // root acts without re-authenticating
        let answers = ConversationAnswers(code: code)
        let context = Unmanaged.passRetained(answers)
        defer { context.release() }
        var conv = pam_conv(conv: totpEnrollConversation, appdata_ptr: context.toOpaque())
        var handle: OpaquePointer? = nil
        guard pam_start("totp-enroll", user, &conv, &handle) == PAM_SUCCESS, let handle else {
            throw CLIError("cannot start PAM (service totp-enroll)")
        }
        var status = pam_authenticate(handle, 0)
        if status == PAM_SUCCESS { status = pam_acct_mgmt(handle, 0) }
        pam_end(handle, status)
        guard status == PAM_SUCCESS else {
            throw CLIError("authentication failed: nothing was changed")
        }
    }
}

final class ConversationAnswers {
    let code: String?
    init(code: String?) { self.code = code }
}

/// Answers PAM's prompts from the terminal (echo off for hidden prompts) or, without a
/// terminal, from standard input; `--code` answers a prompt that asks for a code.
private let totpEnrollConversation: @convention(c) (Int32, UnsafeMutablePointer<UnsafePointer<pam_message>?>?,
                                                    UnsafeMutablePointer<UnsafeMutablePointer<pam_response>?>?,
                                                    UnsafeMutableRawPointer?) -> Int32 = { count, messages, responses, data in
    guard count > 0, count <= 32, let messages, let responses, let data else { return PAM_CONV_ERR }
    let answers = Unmanaged<ConversationAnswers>.fromOpaque(data).takeUnretainedValue()
    guard let out = calloc(Int(count), MemoryLayout<pam_response>.stride)?.assumingMemoryBound(to: pam_response.self) else {
        return PAM_BUF_ERR
    }
    for i in 0..<Int(count) {
        guard let message = messages[i]?.pointee else { continue }
        let text = message.msg.map { String(cString: $0) } ?? ""
        var reply: String? = nil
        switch message.msg_style {
        case PAM_PROMPT_ECHO_OFF:
            if let code = answers.code, asksForCode(text) {
                reply = code
            } else {
                reply = readHidden(text)
            }
        case PAM_PROMPT_ECHO_ON:
            reply = promptLine(text)
        case PAM_ERROR_MSG, PAM_TEXT_INFO:
            writeStderr(text + "\n")
        default:
            break
        }
        if message.msg_style == PAM_PROMPT_ECHO_OFF || message.msg_style == PAM_PROMPT_ECHO_ON {
            guard let reply else {
                for j in 0..<i { if let r = out[j].resp { free(r) } }
                free(out)
                return PAM_CONV_ERR
            }
            out[i].resp = strdup(reply)
        }
    }
    responses.pointee = out
    return PAM_SUCCESS
}

/// Reads a line without echo from the terminal; from stdin when there is no terminal.
/// While echo is off, a signal that would end or stop the process first puts the terminal
/// back as it was (`HiddenInput`), so Ctrl-C at the prompt does not leave echo off.
func readHidden(_ prompt: String) -> String? {
    let fd = clibc_open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY, 0)
    guard fd >= 0 else { return promptLine(prompt) }
    defer { close(fd) }
    var saved = termios()
    let isTerminal = tcgetattr(fd, &saved) == 0
    var line: [UInt8] = []
    var restart = true
    while restart {
        restart = false
        if isTerminal { HiddenInput.echoOff(fd: fd, saved: saved) }
        _ = prompt.withCString { write(fd, $0, strlen($0)) }
        line.removeAll()
        var byte: UInt8 = 0
        var ended = false
        while line.count < 1024 {
            // Stopped (Ctrl-Z) with the terminal restored, and now continued: echo is on
            // again, so turn it off and ask again; what was typed before is discarded.
            if isTerminal && HiddenInput.wasStopped { HiddenInput.restore(); restart = true; break }
            let n = read(fd, &byte, 1)
            if n < 0 && clibc_errno() == EINTR { continue }
            if n <= 0 { ended = line.isEmpty; break }
            if byte == 0x0A { break }
            line.append(byte)
        }
        if ended && !restart {
            // End of input (Ctrl-D) with nothing typed: no answer, not an empty one.
            if isTerminal { HiddenInput.restore() }
            _ = write(fd, "\n", 1)
            return nil
        }
    }
    if isTerminal { HiddenInput.restore() }
    _ = write(fd, "\n", 1)
    return String(decoding: line, as: UTF8.self)
}

/// Echo off for a hidden prompt, with the terminal restored on every way out. Only while echo
/// is off, SIGINT, SIGQUIT, SIGTERM and SIGHUP (the ways a person or a closing terminal ends
/// the tool) and SIGTSTP, SIGTTIN and SIGTTOU (the ways it is stopped) have a handler that
/// restores the saved terminal settings with tcsetattr (async-signal-safe; TCSAFLUSH also drops
/// a half-typed password so the shell cannot read it), resets the signal to its default action
/// and raises it again: the process then ends, or stops, exactly as it would have, with echo
/// on. A stopped prompt that is continued turns echo off again and asks again (`readHidden`).
/// A signal the caller ignores (nohup, a background job) stays ignored. SIGKILL cannot be
/// caught: nothing can restore the terminal after it (`stty sane` can).
enum HiddenInput {
    static let signals: [Int32] = [SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGTSTP, SIGTTIN, SIGTTOU]

    /// What the handler needs, in memory it reaches without the Swift runtime: allocated once,
    /// filled in before any handler is installed.
    struct Shared {
        var fd: Int32
        var saved: termios
        var stopped: Int32
    }
    nonisolated(unsafe) static let shared: UnsafeMutablePointer<Shared> = {
        let p = UnsafeMutablePointer<Shared>.allocate(capacity: 1)
        p.initialize(to: Shared(fd: -1, saved: termios(), stopped: 0))
        return p
    }()
    /// The dispositions the handlers replaced, per signal (main code only).
    nonisolated(unsafe) static var previous: [(Int32, sigaction)] = []

    /// True when a stop signal was handled since echo was last turned off.
    static var wasStopped: Bool { shared.pointee.stopped != 0 }

    /// Installs the handlers, then turns echo off on `fd` (in that order: no moment with echo
    /// off and no handler).
    static func echoOff(fd: Int32, saved: termios) {
        shared.pointee = Shared(fd: fd, saved: saved, stopped: 0)
        var action = sigaction()
        action.__sigaction_handler.sa_handler = restoreTerminalAndReraise
        action.sa_flags = 0  // no SA_RESTART: a read in progress returns EINTR
        sigemptyset(&action.sa_mask)
        for signo in signals { sigaddset(&action.sa_mask, signo) }  // one handler at a time
        previous.removeAll()
        for signo in signals {
            var old = sigaction()
            guard sigaction(signo, nil, &old) == 0, !isIgnored(old) else { continue }
            if sigaction(signo, &action, nil) == 0 { previous.append((signo, old)) }
        }
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO)
        _ = tcsetattr(fd, TCSAFLUSH, &quiet)
    }

    /// Restores the terminal, then the previous dispositions (in that order: a signal in
    /// between finds the handler, which restores again, harmlessly).
    static func restore() {
        _ = tcsetattr(shared.pointee.fd, TCSAFLUSH, &shared.pointee.saved)
        for (signo, old) in previous {
            var old = old
            _ = sigaction(signo, &old, nil)
        }
        previous.removeAll()
    }

    static func isIgnored(_ action: sigaction) -> Bool {
        guard let handler = action.__sigaction_handler.sa_handler, action.sa_flags & SA_SIGINFO == 0 else { return false }
        return unsafeBitCast(handler, to: Int.self) == unsafeBitCast(clibc_sig_ign(), to: Int.self)
    }
}

/// The signal handler: async-signal-safe calls only (tcsetattr, write, sigaction, raise), no
/// allocation, no locks. The raised signal is blocked until the handler returns, then takes
/// its default action.
private func restoreTerminalAndReraise(_ signo: Int32) {
    let shared = HiddenInput.shared
    _ = tcsetattr(shared.pointee.fd, TCSAFLUSH, &shared.pointee.saved)
    switch signo {
    case SIGTSTP, SIGTTIN, SIGTTOU: shared.pointee.stopped = 1
    default: _ = write(shared.pointee.fd, "\n", 1)  // the shell's prompt starts on a new line
    }
    var action = sigaction()
    action.__sigaction_handler.sa_handler = clibc_sig_dfl()
    sigemptyset(&action.sa_mask)
    _ = sigaction(signo, &action, nil)
    _ = raise(signo)
}

/// A prompt that asks for a code ("Verification code: ", "TOTP code for ...: "): it has "code"
/// in it, in any case (ASCII; Embedded Swift has no substring search on String).
func asksForCode(_ prompt: String) -> Bool {
    let bytes = Array(prompt.utf8).map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
    guard bytes.count >= 4 else { return false }
    return (0...(bytes.count - 4)).contains { equals(bytes[$0..<($0 + 4)], "code") }
}
