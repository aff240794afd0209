import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// A real screen locker as the module meets it on a desktop: Debian's i3lock (PAM service
/// "i3lock") on an Xvfb display, run as an unprivileged throwaway account, typed at by xdotool
/// through XTEST. i3lock -n stays in the foreground and exits 0 once pam_authenticate succeeds;
/// after a failed attempt it stays locked and takes input again (after the fail delay).
///
/// Owns: the account, Xvfb on a free display, /etc/pam.d/i3lock (saved at init, restored by
/// `cleanup`), the i3lock it started, and a log directory. `cleanup` undoes all of it, also after
/// a failed or thrown init.
final class ScreenLockerFixture {
    static let servicePath = "/etc/pam.d/i3lock"

    let root: URL
    let account: ThrowawayAccount
    private(set) var display = ""
    private var xvfb: Process?
    private var locker: Process?
    private var lockerChildren: [pid_t] = []
    private var lockerCount = 0
    private var serviceSaved = false
    private var savedService: Data?
    private var savedMode: mode_t = 0o644
    private var cleanedUp = false

    init() throws {
        root = try makeTemporaryDirectory("pam_totp_locker")
        do { account = try ThrowawayAccount(prefix: "i3lk") } catch { removeTemporaryDirectory(root); throw error }
        do {
            saveService()
            try startXvfb()
        } catch {
            cleanup()
            throw error
        }
    }

    // MARK: The PAM stack

    /// Writes /etc/pam.d/i3lock (0644: i3lock reads it as the user).
    func install(_ stack: String) throws {
        unlink(Self.servicePath)
        guard FileManager.default.createFile(atPath: Self.servicePath, contents: Data(stack.utf8),
                                             attributes: [.posixPermissions: 0o644]),
              chmod(Self.servicePath, 0o644) == 0 else { throw LockerError.io("cannot write \(Self.servicePath)") }
    }

    private func saveService() {
        savedService = FileManager.default.contents(atPath: Self.servicePath)
        var st = stat()
        if stat(Self.servicePath, &st) == 0 { savedMode = st.st_mode & 0o7777 }
        serviceSaved = true
    }

    private func restoreService() {
        guard serviceSaved else { return }
        unlink(Self.servicePath)
        if let savedService {
            if !FileManager.default.createFile(atPath: Self.servicePath, contents: savedService) || chmod(Self.servicePath, savedMode) != 0 {
                print("ScreenLockerFixture: could not restore \(Self.servicePath)")
            }
        }
        serviceSaved = false
    }

    // MARK: The X server

    /// Xvfb on the first display number whose socket and lock file are free. -ac: the
    /// unprivileged i3lock and root's xdotool connect without a cookie; -noreset: the server does
    /// not reset (dropping connections) each time its last client (the readiness probe) leaves.
    private func startXvfb() throws {
        let xvfbPath = "/usr/bin/Xvfb"
        guard FileManager.default.isExecutableFile(atPath: xvfbPath) else { throw LockerError.io("Xvfb is not installed (apt-get install xvfb)") }
        let log = root.appendingPathComponent("xvfb.log").path
        for n in 20...99 {
            let socket = "/tmp/.X11-unix/X\(n)"
            if FileManager.default.fileExists(atPath: socket) || FileManager.default.fileExists(atPath: "/tmp/.X\(n)-lock") { continue }
            FileManager.default.createFile(atPath: log, contents: nil)
            let out = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
            defer { try? out.close() }
            let p = Process()
            p.executableURL = URL(fileURLWithPath: xvfbPath)
            p.arguments = [":\(n)", "-nolisten", "tcp", "-ac", "-noreset", "-screen", "0", "800x600x24"]
            p.standardInput = FileHandle.nullDevice
            p.standardOutput = out
            p.standardError = out
            try p.run()
            xvfb = p
            let answered = waitUntil(timeout: 10) {
                guard p.isRunning else { return true }
                guard FileManager.default.fileExists(atPath: socket) else { return false }
                return (try? runCommand(["xdpyinfo", "-display", ":\(n)"]))?.status == 0
            }
            if answered && p.isRunning {
                display = ":\(n)"
                return
            }
            stopProcess(p)
            xvfb = nil
            // Exited at once: another server took :n between the check and the start; try the next.
            if answered { continue }
            throw LockerError.io("Xvfb :\(n) did not answer within 10 s: \(contents(log))")
        }
        throw LockerError.io("no free X display number in 20...99")
    }

    // MARK: The locker

    /// Starts `i3lock -n` as the account and returns once it holds the keyboard: i3lock forks
    /// its window-raising child only after grab_pointer_and_keyboard succeeded (i3lock.c), so
    /// a child process is the sign that typed keys reach it. `wrap` may put the command under
    /// another that execs it in place (`SyslogCapture.wrap`: the module's syslog lines).
    func lock(wrap: ([String]) -> [String] = { $0 }) throws -> Process {
        lockerCount += 1
        let log = root.appendingPathComponent("i3lock-\(lockerCount).log").path
        FileManager.default.createFile(atPath: log, contents: nil)
        let out = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        defer { try? out.close() }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        // env, setpriv (and what `wrap` adds) exec: i3lock keeps this pid.
        p.arguments = wrap(account.setpriv + ["env", "-i", "DISPLAY=\(display)", "HOME=/", "i3lock", "-n"])
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = out
        p.standardError = out
        try p.run()
        locker = p
        let pid = p.processIdentifier
        let grabbed = waitUntil(timeout: 10) { !p.isRunning || !Self.children(of: pid).isEmpty }
        guard grabbed, p.isRunning else {
            let why = p.isRunning ? "did not grab the keyboard within 10 s" : "exited with \(p.terminationStatus)"
            stop(p)
            throw LockerError.io("i3lock \(why): \(contents(log))")
        }
        lockerChildren = Self.children(of: pid)
        usleep(200_000)  // the grab is done; let it reach its event loop
        return p
    }

    /// Types `text` and Return into the display (as root, through XTEST).
    func type(_ text: String) throws {
        var env = ProcessInfo.processInfo.environment
        env["DISPLAY"] = display
        for args in [["xdotool", "type", "--delay", "20", text], ["xdotool", "key", "Return"]] {
            let r = try runCommand(args, environment: env)
            guard r.status == 0 else { throw LockerError.io("\(args[1]) failed (\(r.status)): \(r.stderr)") }
        }
    }

    /// True when `p` exited 0 (unlocked) within `timeout` seconds, false when it is still
    /// locked then. Any other end (a crash, a non-zero status) fails the test.
    func unlocked(_ p: Process, within timeout: TimeInterval = 6, file: StaticString = #filePath, line: UInt = #line) -> Bool {
        guard waitUntil(timeout: timeout, { !p.isRunning }) else { return false }
        p.waitUntilExit()
        if p.terminationReason == .exit && p.terminationStatus == 0 { return true }
        XCTFail("i3lock ended with \(p.terminationReason == .exit ? "status" : "signal") \(p.terminationStatus): "
                + contents(root.appendingPathComponent("i3lock-\(lockerCount).log").path), file: file, line: line)
        return false
    }

    /// Ends a locker (SIGTERM, reaped) and its raise_loop child, which otherwise ends by itself
    /// once the lock window is gone.
    func stop(_ p: Process) {
        stopProcess(p)
        for child in lockerChildren {
            if !waitUntil(timeout: 1, { !Self.isLiveLocker(child) }) { kill(child, SIGKILL) }
        }
        lockerChildren = []
        if locker === p { locker = nil }
    }

    /// One attempt on a fresh locker: installs `pamStack` if given, locks, types `text` and
    /// Return; true when it unlocked within `timeout` s, false when it stayed locked.
    func attempt(typing text: String, pamStack: String? = nil, timeout: TimeInterval = 6,
                 file: StaticString = #filePath, line: UInt = #line) throws -> Bool {
        if let pamStack { try install(pamStack) }
        let p = try lock()
        defer { stop(p) }
        try type(text)
        return unlocked(p, within: timeout, file: file, line: line)
    }

    func cleanup() {
        guard !cleanedUp else { return }
        cleanedUp = true
        if let locker { stop(locker) }
        if let xvfb { stopProcess(xvfb) }
        xvfb = nil
        restoreService()
        account.delete()
        removeTemporaryDirectory(root)
    }

    // MARK: Helpers

    static func children(of pid: pid_t) -> [pid_t] {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8) else { return [] }
        return text.split(separator: " ").compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// `pid` is an i3lock that has not exited (not a zombie, not another program since).
    static func isLiveLocker(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        let name = stat[stat.index(after: stat.firstIndex(of: "(") ?? stat.startIndex)..<close]
        let state = stat[stat.index(close, offsetBy: 2)...].prefix(1)
        return name == "i3lock" && state != "Z" && state != "X"
    }

    private func contents(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    enum LockerError: Error, CustomStringConvertible {
        case io(String)
        var description: String { if case .io(let s) = self { return s }; return "" }
    }
}

/// i3lock + pam_unix, then i3lock + pam_totp through pam-totpd (the module runs as the user and
/// cannot read the store) with forward_pass: one typed text, password then code.
final class ScreenLockerTests: XCTestCase {
    var fixture: ScreenLockerFixture!
    var daemon: DaemonFixture?
    var secret: [UInt8] = []

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: a throwaway account, /etc/pam.d/i3lock, pam-totpd")
        XCTAssertTrue(FileManager.default.fileExists(atPath: moduleURL.path), "build the module first: \(moduleURL.path)")
        fixture = try ScreenLockerFixture()
        secret = randomTOTPSecret()
    }

    override func tearDown() {
        daemon?.cleanup()
        daemon = nil
        fixture?.cleanup()
        fixture = nil
    }

    static let pamUnixOnly = """
        auth     required  pam_unix.so
        account  required  pam_unix.so

        """

    /// Starts pam-totpd on a store of its own and installs the one-field stack of pam_totp(8):
    /// pam_totp (through the daemon) takes the trailing code off the typed text and hands the
    /// rest to pam_unix as PAM_AUTHTOK; the after_password line checks the code after pam_unix.
    func startDaemonAndInstallForwardPassStack() throws -> DaemonFixture {
        let d = try DaemonFixture()
        daemon = d
        try d.start()
        try fixture.install("""
            auth     [success=ok ignore=ignore cred_insufficient=bad default=die]  \(moduleURL.path) forward_pass code_after_password nullok socket=\(d.socketPath)
            auth     requisite  pam_unix.so use_first_pass
            auth     required   \(moduleURL.path) forward_pass after_password nullok socket=\(d.socketPath)
            account  required  pam_unix.so

            """)
        return d
    }

    /// Issue 39: someone at the keyboard without the password, typing any password and a code,
    /// counts nothing against the user and spends no code (the code is checked after pam_unix).
    func testAWrongPasswordCountsNothingAndSpendsNoCode() throws {
        let d = try startDaemonAndInstallForwardPassStack()
        try d.enroll(user, uid: fixture.account.uid, secret: secret)
        awayFromStepBoundary(margin: 8)
        let p = try fixture.lock()
        defer { fixture.stop(p) }
        let code = try codeNow(secret)
        try fixture.type("not-" + password + code)
        XCTAssertFalse(fixture.unlocked(p), "a wrong password unlocked")
        var state = try d.state(user)
        XCTAssertEqual(state.failures, 0, "a wrong password was counted: \(d.output)")
        XCTAssertTrue(state.lastSteps.isEmpty, "a wrong password spent the code")
        try fixture.type(password + code)
        XCTAssertTrue(fixture.unlocked(p), "the right password and that code did not unlock: \(d.output)")
        state = try d.state(user)
        XCTAssertEqual(state.lastSteps.count, 1)
    }

    var user: String { fixture.account.name }
    var password: String { fixture.account.password }

    /// The harness itself, without pam_totp: the right password unlocks; a wrong one leaves it
    /// locked, and that same locker then takes the right one (it kept reading the keyboard).
    func testHarnessPamUnixOnly() throws {
        try fixture.install(Self.pamUnixOnly)
        XCTAssertTrue(try fixture.attempt(typing: password), "the right password did not unlock")
        let p = try fixture.lock()
        defer { fixture.stop(p) }
        try fixture.type("not-" + password)
        XCTAssertFalse(fixture.unlocked(p), "a wrong password unlocked")
        try fixture.type(password)
        XCTAssertTrue(fixture.unlocked(p), "the right password after a wrong one did not unlock")
    }

    /// (a) password + the current code unlocks; pam-totpd recorded the step.
    func testPasswordAndRightCodeUnlocks() throws {
        let d = try startDaemonAndInstallForwardPassStack()
        try d.enroll(user, uid: fixture.account.uid, secret: secret)
        awayFromStepBoundary()
        XCTAssertTrue(try fixture.attempt(typing: password + codeNow(secret)), "password + code did not unlock: \(d.output)")
        let state = try d.state(user)
        XCTAssertEqual(state.failures, 0)
        XCTAssertEqual(state.lastSteps.count, 1, "the accepted step is recorded")
    }

    /// (b) password + a wrong code stays locked, and pam-totpd counted the failure (so the text
    /// did reach the module); the same locker then unlocks with password + the right code.
    func testPasswordAndWrongCodeStaysLocked() throws {
        let d = try startDaemonAndInstallForwardPassStack()
        try d.enroll(user, uid: fixture.account.uid, secret: secret)
        let p = try fixture.lock()
        defer { fixture.stop(p) }
        try fixture.type(password + codeOutsideWindow(secret))
        XCTAssertFalse(fixture.unlocked(p), "a wrong code unlocked")
        XCTAssertEqual(try d.state(user).failures, 1, "pam-totpd counted the wrong code: \(d.output)")
        awayFromStepBoundary()
        try fixture.type(password + codeNow(secret))
        XCTAssertTrue(fixture.unlocked(p), "password + the right code after a wrong one did not unlock")
        XCTAssertEqual(try d.state(user).failures, 0)
    }

    /// (c) no record under nullok: the whole text is the password (a password ending in a
    /// letter, so no digits are taken for a code).
    func testUnenrolledUserUnlocksWithPasswordAlone() throws {
        let d = try startDaemonAndInstallForwardPassStack()
        XCTAssertTrue(try fixture.attempt(typing: password), "an unenrolled user under nullok did not unlock: \(d.output)")
        XCTAssertFalse(try fixture.attempt(typing: "not-" + password), "a wrong password unlocked an unenrolled user")
    }

}
