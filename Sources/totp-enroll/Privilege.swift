import CLibc
import CPAM
import Glibc
import MFACore

/// The set-uid model (DESIGN.md §4.3). totp-enroll is installed set-uid root, like passwd: it
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
    static func dropPermanently() throws {
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
    static func reauthenticate(user: String, code: String?) throws {
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
            if let code = answers.code, text.lowercased().contains("code") {
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
func readHidden(_ prompt: String) -> String? {
    let fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
    guard fd >= 0 else { return promptLine(prompt) }
    defer { close(fd) }
    var saved = termios()
    let isTerminal = tcgetattr(fd, &saved) == 0
    var quiet = saved
    quiet.c_lflag &= ~tcflag_t(ECHO)
    if isTerminal { _ = tcsetattr(fd, TCSAFLUSH, &quiet) }
    defer { if isTerminal { _ = tcsetattr(fd, TCSAFLUSH, &saved) } }
    _ = prompt.withCString { write(fd, $0, strlen($0)) }
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while line.count < 1024 {
        let n = read(fd, &byte, 1)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 || byte == 0x0A { break }
        line.append(byte)
    }
    _ = write(fd, "\n", 1)
    return String(decoding: line, as: UTF8.self)
}
