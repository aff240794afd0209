import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The shipped module under test: PAM_TOTP_SO (set by `make check` to the stripped Embedded
/// build), else the Embedded build in .build-embedded. Tests fail, not skip, if it is missing.
let moduleURL: URL = {
    if let path = ProcessInfo.processInfo.environment["PAM_TOTP_SO"] { return URL(fileURLWithPath: path) }
    return packageRoot.appendingPathComponent(".build-embedded/pam_totp.so")
}()

/// totp-enroll under test: TOTP_ENROLL, else the debug build next to the tests.
let enrollURL: URL = {
    if let path = ProcessInfo.processInfo.environment["TOTP_ENROLL"] { return URL(fileURLWithPath: path) }
    return packageRoot.appendingPathComponent(".build/debug/totp-enroll")
}()

/// pam-totpd under test: PAM_TOTPD, else the debug build next to the tests.
let daemonURL: URL = {
    if let path = ProcessInfo.processInfo.environment["PAM_TOTPD"] { return URL(fileURLWithPath: path) }
    return packageRoot.appendingPathComponent(".build/debug/pam-totpd")
}()

/// What the application side of the conversation answers, and what it was asked.
final class Conversation {
    var answer: [UInt8]?
    var fail = false
    var prompts: [String] = []
    /// When set, answers each question from everything shown so far (info messages included).
    var respond: (([String]) -> [UInt8]?)?
    init(answer: [UInt8]?) { self.answer = answer }
}

private let converse: @convention(c) (Int32, UnsafeMutablePointer<UnsafePointer<pam_message>?>?,
                                      UnsafeMutablePointer<UnsafeMutablePointer<pam_response>?>?,
                                      UnsafeMutableRawPointer?) -> Int32 = { count, messages, responses, data in
    guard let data, let messages, let responses, count > 0 else { return PAM_CONV_ERR }
    let conversation = Unmanaged<Conversation>.fromOpaque(data).takeUnretainedValue()
    if conversation.fail { return PAM_CONV_ERR }
    guard let out = calloc(Int(count), MemoryLayout<pam_response>.stride)?.assumingMemoryBound(to: pam_response.self) else {
        return PAM_BUF_ERR
    }
    for i in 0..<Int(count) {
        guard let message = messages[i]?.pointee else { continue }
        conversation.prompts.append(message.msg.map { String(cString: $0) } ?? "")
        if message.msg_style == PAM_PROMPT_ECHO_OFF || message.msg_style == PAM_PROMPT_ECHO_ON,
           let answer = conversation.respond.map({ $0(conversation.prompts) }) ?? conversation.answer {
            // The raw bytes, NULs included, as a C string: libpam sees up to the first NUL.
            let buffer = malloc(answer.count + 1)!.assumingMemoryBound(to: UInt8.self)
            answer.withUnsafeBufferPointer { buffer.initialize(from: $0.baseAddress!, count: answer.count) }
            buffer[answer.count] = 0
            out[i].resp = UnsafeMutableRawPointer(buffer).assumingMemoryBound(to: CChar.self)
        }
    }
    responses.pointee = out
    return PAM_SUCCESS
}

/// The application's PAM_FAIL_DELAY callback (a documented libpam feature): here it does not
/// sleep, so hundreds of failures take no time. pamtester has none, so the 2 s delay applies there.
private let noDelay: @convention(c) (Int32, UInt32, UnsafeMutableRawPointer?) -> Void = { _, _, _ in }

/// A PAM service directory for pam_start_confdir, with a store, removed on `cleanup`.
final class PAMFixture {
    let root: URL
    let confdir: URL
    let store: URL

    init() throws {
        root = try makeTemporaryDirectory("pam_totp_pam")
        confdir = root.appendingPathComponent("pam.d")
        store = root.appendingPathComponent("store")
        try FileManager.default.createDirectory(at: confdir, withIntermediateDirectories: false)
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: moduleURL.path), "build the module first: \(moduleURL.path)")
    }

    func cleanup() { removeTemporaryDirectory(root) }

    /// Writes service `name` with the given auth lines; `MODULE` stands for the module path
    /// and `STORE` for the store argument.
    func service(_ name: String, _ lines: [String]) throws {
        let text = lines.map {
            $0.replacingOccurrences(of: "MODULE", with: moduleURL.path)
              .replacingOccurrences(of: "STORE", with: "store=" + store.path)
        }.joined(separator: "\n") + "\n"
        try text.write(to: confdir.appendingPathComponent(name), atomically: true, encoding: .utf8)
    }

    func enroll(_ user: String, secret: [UInt8], parameters: OTPParameters = .default, label: String = "phone",
                recovery: RecoverySet? = nil) throws {
        let s = try Store(path: Array(store.path.utf8))
        try s.write(user: Array(user.utf8), record: UserRecord(factors: [
            try Factor(label: Array(label.utf8), parameters: parameters, created: 1_700_000_000, secret: secret),
        ], recovery: recovery))
    }

    func state(_ user: String) throws -> UserState {
        try Store(path: Array(store.path.utf8)).readState(user: Array(user.utf8))
    }

    /// One pam_start_confdir / pam_authenticate / pam_end cycle through the real libpam.
    func authenticate(service: String, user: String?, conversation: Conversation, keepFailDelay: Bool = false) -> Int32 {
        let data = Unmanaged.passUnretained(conversation).toOpaque()
        var conv = pam_conv(conv: converse, appdata_ptr: data)
        var handle: OpaquePointer? = nil
        let started = pam_start_confdir(service, user, &conv, confdir.path, &handle)
        guard started == PAM_SUCCESS, let handle else { return started }
        if !keepFailDelay {
            XCTAssertEqual(pam_set_item(handle, PAM_FAIL_DELAY, unsafeBitCast(noDelay, to: UnsafeRawPointer.self)), PAM_SUCCESS)
        }
        let result = pam_authenticate(handle, 0)
        pam_end(handle, result)
        return result
    }

    /// Two pam_authenticate calls on one handle (an application that keeps its handle, a
    /// screen locker), with `between` run on the handle in between (e.g. pam_setcred).
    func authenticateTwice(service: String, user: String, conversation: Conversation,
                           between: (OpaquePointer) -> Void = { _ in }, beforeSecond: () -> Void = {}) -> (Int32, Int32) {
        let data = Unmanaged.passUnretained(conversation).toOpaque()
        var conv = pam_conv(conv: converse, appdata_ptr: data)
        var handle: OpaquePointer? = nil
        let started = pam_start_confdir(service, user, &conv, confdir.path, &handle)
        guard started == PAM_SUCCESS, let handle else { return (started, started) }
        XCTAssertEqual(pam_set_item(handle, PAM_FAIL_DELAY, unsafeBitCast(noDelay, to: UnsafeRawPointer.self)), PAM_SUCCESS)
        let first = pam_authenticate(handle, 0)
        between(handle)
        beforeSecond()
        let second = pam_authenticate(handle, 0)
        pam_end(handle, second)
        return (first, second)
    }
}

func currentCode(_ secret: [UInt8], _ parameters: OTPParameters = .default, offsetSteps: Int64 = 0) throws -> [UInt8] {
    let now = Int64(time(nil))
    return try TOTP.code(secret: secret, parameters: parameters, at: now + offsetSteps * Int64(parameters.period))
}

/// Waits until at least `margin` seconds remain in the current 30 s step, so a code computed
/// now is still current when the module checks it (only matters for adjacent_intervals=0).
func awayFromStepBoundary(margin: Int64 = 3) {
    while 30 - Int64(time(nil)) % 30 < margin { usleep(200_000) }
}

/// Starts `count` pamtester processes at once for `service`, all answering `answer` (under
/// `faketime` if given); returns their exit codes.
func startPamtestersAtOnce(_ count: Int, service: String, user: String, answer: String, faketime: String? = nil) throws -> [Int32] {
    var processes: [Process] = []
    let dir = try makeTemporaryDirectory("pamtesters")
    defer { removeTemporaryDirectory(dir) }
    let input = dir.appendingPathComponent("answer")
    try (answer + "\n").write(to: input, atomically: true, encoding: .utf8)
    for _ in 0..<count {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = (faketime.map { ["faketime", $0] } ?? []) + ["pamtester", service, user, "authenticate"]
        p.standardInput = try FileHandle(forReadingFrom: input)
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        processes.append(p)
    }
    for p in processes { try p.run() }
    for p in processes { p.waitUntilExit() }
    return processes.map(\.terminationStatus)
}
