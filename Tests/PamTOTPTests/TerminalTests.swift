import Foundation
import TestSupport
import XCTest

/// totp-enroll on a real terminal (a pseudo-terminal the test holds both sides of), run by an
/// unprivileged user, so that it asks for the password with echo off (review finding 10): a
/// signal at that prompt must leave the terminal as it found it, echo on.
final class TerminalTests: XCTestCase {
    var fixture: SetUIDFixture!
    var binary: String { fixture.binary }
    var user: String { fixture.user }
    var uid: uid_t { fixture.uid }
    var gid: gid_t { fixture.gid }
    var password: String { fixture.password }
    var storePath: String { fixture.storePath }
    var master: Int32 = -1
    var slave: Int32 = -1

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: useradd, a set-uid copy, /etc/pam.d/totp-enroll")
        fixture = try SetUIDFixture(prefix: "totpt", service: SetUIDFixture.passwordAndModuleService)
        // The terminal: the test keeps the slave side open to read its settings afterwards.
        // posix_openpt/unlockpt/ptsname are not visible through Glibc's module: what they do
        // on Linux is open /dev/ptmx, clear the lock (TIOCSPTLCK) and ask the number (TIOCGPTN).
        master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(master, 0)
        var unlock: Int32 = 0, number: UInt32 = 0
        XCTAssertEqual(ioctl(master, 0x4004_5431 /* TIOCSPTLCK */, &unlock), 0)
        XCTAssertEqual(ioctl(master, 0x8004_5430 /* TIOCGPTN */, &number), 0)
        slave = open("/dev/pts/\(number)", O_RDWR | O_NOCTTY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(slave, 0)
        XCTAssertEqual(echoIsOn(), true, "a new terminal echoes")
    }

    override func tearDown() {
        guard isRoot, fixture != nil else { return }
        if master >= 0 { close(master) }
        if slave >= 0 { close(slave) }
        fixture.cleanup()
    }

    /// ECHO on the terminal, as the slave side sees it now (nil if it cannot be read).
    func echoIsOn() -> Bool? {
        var t = termios()
        guard tcgetattr(slave, &t) == 0 else { return nil }
        return t.c_lflag & tcflag_t(ECHO) != 0
    }

    /// Starts `totp-enroll ARGS` as the user in a new session whose controlling terminal is
    /// the pseudo-terminal (stdin, stdout and stderr too), as a login shell would run it.
    func startOnTerminal(_ args: [String]) throws -> SpawnedProcess {
        try startAsUserOnTerminal([binary] + args)
    }

    /// Starts `command` as the user in a new session on the pseudo-terminal.
    func startAsUserOnTerminal(_ command: [String]) throws -> SpawnedProcess {
        let p = SpawnedProcess()
        try p.run(["/usr/bin/setsid", "--ctty", "--wait", "setpriv", "--reuid=\(uid)", "--regid=\(gid)", "--clear-groups"] + command,
                  stdio: slave)
        return p
    }

    /// Appends what the program wrote to the terminal within `milliseconds`; false on error.
    func drain(into transcript: inout String, milliseconds: Int32 = 200) -> Bool {
        var pfd = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
        let ready = poll(&pfd, 1, milliseconds)
        if ready < 0 { return errno == EINTR }
        if ready == 0 { return true }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = read(master, &buffer, buffer.count)
        if n < 0 { return errno == EINTR }
        transcript += String(decoding: buffer[..<n], as: UTF8.self)
        return n > 0
    }

    /// Reads what the program writes until `text` has appeared `count` times in the
    /// transcript (false after 15 s).
    func readUntil(_ text: String, count: Int = 1, transcript: inout String) -> Bool {
        let deadline = Date().addingTimeInterval(15)
        while transcript.components(separatedBy: text).count - 1 < count {
            guard Date() < deadline, drain(into: &transcript) else { return false }
        }
        return true
    }

    /// Waits (at most 15 s, reading the terminal meanwhile) for the process to end.
    func waitForExit(_ p: SpawnedProcess, transcript: inout String) {
        let deadline = Date().addingTimeInterval(15)
        while p.isRunning && Date() < deadline {
            if !drain(into: &transcript) { usleep(100_000) }
        }
        if p.isRunning {
            XCTFail("totp-enroll did not end: \(transcript.debugDescription)")
            p.terminate()
        }
        p.waitUntilExit()
        _ = drain(into: &transcript, milliseconds: 0)
    }

    /// The foreground process group of the terminal: totp-enroll.
    func foregroundGroup() -> pid_t {
        var pgrp: pid_t = 0
        guard ioctl(master, UInt(TIOCGPGRP), &pgrp) == 0 else { return 0 }
        return pgrp
    }

    /// The review's steps: an unprivileged user runs totp-enroll on a terminal, it asks for
    /// the password with echo off, the user presses Ctrl-C. Echo is on again afterwards.
    func testCtrlCAtThePasswordPromptRestoresEcho() throws {
        let p = try startOnTerminal(["--name", "phone", "--qr", "none"])
        var transcript = ""
        XCTAssertTrue(readUntil("Password", transcript: &transcript), "asked for the password: \(transcript.debugDescription)")
        XCTAssertEqual(echoIsOn(), false, "echo is off at the password prompt")
        XCTAssertEqual(write(master, "\u{03}", 1), 1)  // Ctrl-C
        waitForExit(p, transcript: &transcript)
        XCTAssertNotEqual(p.terminationStatus, 0, transcript)
        XCTAssertEqual(echoIsOn(), true, "Ctrl-C at the password prompt left echo off")
        XCTAssertFalse(transcript.contains("otpauth://"), "nothing was enrolled: \(transcript.debugDescription)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: storePath + "/" + user))
    }

    /// SIGTERM from elsewhere ends it with echo restored too; Ctrl-Z (here in a process group
    /// without job control, so it does not stop) asks again, with echo off again.
    func testTerminateAndSuspendAtThePasswordPrompt() throws {
        let p = try startOnTerminal(["--name", "phone", "--qr", "none"])
        var transcript = ""
        XCTAssertTrue(readUntil("Password", transcript: &transcript), "asked for the password: \(transcript.debugDescription)")
        XCTAssertEqual(write(master, "half-typ", 8), 8)
        XCTAssertEqual(write(master, "\u{1A}", 1), 1)  // Ctrl-Z
        XCTAssertTrue(readUntil("Password", count: 2, transcript: &transcript), "asked again after Ctrl-Z: \(transcript.debugDescription)")
        XCTAssertEqual(echoIsOn(), false, "echo is off again at the repeated prompt")
        let group = foregroundGroup()
        guard group > 1 else {
            XCTFail("no foreground process group on the terminal")
            p.terminate()
            return
        }
        XCTAssertEqual(kill(-group, SIGTERM), 0)
        waitForExit(p, transcript: &transcript)
        XCTAssertNotEqual(p.terminationStatus, 0, transcript)
        XCTAssertEqual(echoIsOn(), true, "SIGTERM at the password prompt left echo off")
        XCTAssertFalse(transcript.contains("half-typ"), "the password was not echoed: \(transcript.debugDescription)")
    }

    /// Ctrl-Z under a shell with job control: the job stops with the terminal restored (the
    /// shell gets an echoing terminal), and `fg` brings back the prompt with echo off again.
    func testSuspendedUnderJobControlLeavesEchoOnAndAsksAgainOnFg() throws {
        let script = "set -m; \(binary) --name phone --qr none; echo SUSPENDED; read go; fg"
        let p = try startAsUserOnTerminal(["/bin/sh", "-c", script])
        var transcript = ""
        XCTAssertTrue(readUntil("Password", transcript: &transcript), "asked for the password: \(transcript.debugDescription)")
        XCTAssertEqual(echoIsOn(), false, "echo is off at the password prompt")
        XCTAssertEqual(write(master, "\u{1A}", 1), 1)  // Ctrl-Z
        XCTAssertTrue(readUntil("SUSPENDED", transcript: &transcript), "the job stopped: \(transcript.debugDescription)")
        XCTAssertEqual(echoIsOn(), true, "the stopped job left echo off for the shell")
        XCTAssertEqual(write(master, "go\n", 3), 3)
        XCTAssertTrue(readUntil("Password", count: 2, transcript: &transcript), "asked again after fg: \(transcript.debugDescription)")
        XCTAssertEqual(echoIsOn(), false, "echo is off again after fg")
        XCTAssertEqual(write(master, password + "\n", password.utf8.count + 1), password.utf8.count + 1)
        XCTAssertTrue(readUntil("Verification code from your app", transcript: &transcript), "authenticated: \(transcript.debugDescription)")
        XCTAssertFalse(transcript.contains(password), "the password was not echoed")
        XCTAssertEqual(write(master, "\u{03}", 1), 1)  // ends the job, and the shell (dash re-raises SIGINT)
        waitForExit(p, transcript: &transcript)
        XCTAssertEqual(echoIsOn(), true)
        XCTAssertFalse(FileManager.default.fileExists(atPath: storePath + "/" + user), "nothing was enrolled")
    }

    /// The ordinary path still works: the password is read without echo and checked, echo is
    /// back on for the next (visible) question, and Ctrl-C there ends it with echo on.
    func testPasswordIsReadWithoutEchoAndEchoComesBack() throws {
        let p = try startOnTerminal(["--name", "phone", "--qr", "none"])
        var transcript = ""
        XCTAssertTrue(readUntil("Password", transcript: &transcript), "asked for the password: \(transcript.debugDescription)")
        XCTAssertEqual(write(master, password + "\n", password.utf8.count + 1), password.utf8.count + 1)
        XCTAssertTrue(readUntil("Verification code from your app", transcript: &transcript), "authenticated: \(transcript.debugDescription)")
        XCTAssertFalse(transcript.contains(password), "the password was not echoed")
        XCTAssertTrue(transcript.contains("otpauth://"), transcript)
        XCTAssertEqual(echoIsOn(), true, "echo is on for the code")
        XCTAssertEqual(write(master, "\u{03}", 1), 1)
        waitForExit(p, transcript: &transcript)
        XCTAssertNotEqual(p.terminationStatus, 0, transcript)
        XCTAssertEqual(echoIsOn(), true)
        XCTAssertFalse(FileManager.default.fileExists(atPath: storePath + "/" + user), "nothing was enrolled")
    }
}
