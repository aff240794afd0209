import Foundation
import TestSupport
import XCTest

/// A local account made for one test (useradd -M -s /bin/sh, a random password through
/// chpasswd), removed with `delete`. For tests that act as an unprivileged user (setpriv).
final class ThrowawayAccount {
    let name: String
    let uid: uid_t
    let gid: gid_t
    /// Letters, digits and '-' only (xdotool types it on any keymap), never ending in a digit:
    /// with forward_pass the module takes trailing digits for the code.
    let password: String

    /// `prefix` + pid + a random number; a name already taken is retried with another number.
    init(prefix: String) throws {
        password = "horse-\(String(UInt64.random(in: 0...UInt64.max), radix: 36))-q"
        var made: String? = nil
        for _ in 0..<5 {
            let candidate = prefix + "\(getpid() % 100000)x\(UInt16.random(in: 0...9999))"
            let add = try runCommand(["useradd", "-M", "-s", "/bin/sh", candidate])
            if add.status == 0 { made = candidate; break }
            guard add.status == 9 else { throw AccountError.useradd(add.stderr) }  // 9: name in use
        }
        guard let made else { throw AccountError.useradd("no free name for prefix \(prefix)") }
        name = made
        do {
            let set = try runCommand(["chpasswd"], input: "\(made):\(password)\n")
            guard set.status == 0 else { throw AccountError.chpasswd(set.stderr) }
            guard let pw = getpwnam(made) else { throw AccountError.useradd("getpwnam(\(made)) found nothing") }
            uid = pw.pointee.pw_uid
            gid = pw.pointee.pw_gid
        } catch {
            _ = try? runCommand(["userdel", made])
            throw error
        }
    }

    /// `setpriv` arguments that run what follows as this account (its own groups, no root).
    var setpriv: [String] {
        ["setpriv", "--reuid", "\(uid)", "--regid", "\(gid)", "--init-groups"]
    }

    func delete() {
        let r = try? runCommand(["userdel", name])
        if r?.status != 0 { print("ThrowawayAccount: userdel \(name) failed: \(r?.stderr ?? "not run")") }
    }

    enum AccountError: Error { case useradd(String), chpasswd(String) }
}

/// Polls `condition` every 50 ms until it holds or `timeout` seconds pass; returns its last value.
@discardableResult
func waitUntil(timeout: TimeInterval, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        if condition() { return true }
        if Date() >= deadline { return false }
        usleep(50_000)
    }
}

/// Ends a process the test started: SIGTERM, up to `grace` seconds, then SIGKILL; always reaps.
func stopProcess(_ p: Process, grace: TimeInterval = 2) {
    if p.isRunning {
        kill(p.processIdentifier, SIGTERM)
        if !waitUntil(timeout: grace, { !p.isRunning }) { kill(p.processIdentifier, SIGKILL) }
    }
    p.waitUntilExit()
}
