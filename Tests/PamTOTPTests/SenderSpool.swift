import Foundation
import TestSupport
import XCTest

/// Where the tests' senders live and what they sent, under `root`: `senders/` (root's, 0755: the
/// programs pam-totpd checks before it runs them) and `spool/` (the delivery user's, 0700). The
/// spool sender appends "to NUMBER uid UID", the message and a "--" line to `spool/messages`.
/// Makes the delivery user pam-totp-sender if there is none (`cleanup` removes it then).
final class SenderSpool {
    let senders: String
    let path: String
    private let createdSender: Bool

    init(in root: URL) throws {
        createdSender = try makeSenderUser()
        senders = root.appendingPathComponent("senders").path
        let spool = root.appendingPathComponent("spool").path
        guard mkdir(senders, 0o755) == 0, mkdir(spool, 0o700) == 0, let pw = getpwnam("pam-totp-sender"),
              chown(spool, pw.pointee.pw_uid, pw.pointee.pw_gid) == 0 else { throw POSIXError(.EIO) }
        path = spool + "/messages"
        try writeSender("sms", "#!/bin/sh\n{ printf 'to %s uid %s\\n' \"$PAM_TOTP_DESTINATION\" \"$(id -u)\"; cat; printf '\\n--\\n'; } >> \(path)\n")
    }

    func cleanup() {
        if createdSender { _ = try? runCommand(["userdel", "pam-totp-sender"]) }
    }

    /// Writes the program `senders/NAME` (0755); returns its path.
    @discardableResult
    func writeSender(_ name: String, _ text: String) throws -> String {
        let program = senders + "/" + name
        try text.write(toFile: program, atomically: true, encoding: .utf8)
        guard chmod(program, 0o755) == 0 else { throw POSIXError(.EIO) }
        return program
    }

    var messages: String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
    var count: Int { messages.components(separatedBy: "\n--\n").count - 1 }

    /// The code in the last message sent (its last 6-digit number).
    var lastCode: String? {
        let m = messages
        guard let r = try? NSRegularExpression(pattern: "\\b([0-9]{6})\\b"),
              let last = r.matches(in: m, range: NSRange(m.startIndex..., in: m)).last,
              let range = Range(last.range(at: 1), in: m) else { return nil }
        return String(m[range])
    }
}
