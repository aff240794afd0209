import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// Hostile files in the store, through the shipped module (pam_start_confdir, in process):
/// links, foreign owners and modes, a 1 GB sparse record, garbage, FIFOs and directories.
/// Every case must deny (with a *valid* code, so following a link or skipping a check would
/// show up as PAM_SUCCESS), must not hang or crash, and must leave the "victim" files outside
/// the store exactly as they were: content, size, mode, owner, mtime and (where the file system
/// updates it, which setUp probes) atime, i.e. not even read. A positive control at the end of
/// each case proves the same code path accepts once the hostile file is gone.
final class HostileFileTests: XCTestCase {
    var fixture: PAMFixture!
    let secret = Array("12345678901234567890".utf8)
    let user = "alice"
    /// Victim path -> content. All 0600 and owned by us: the same owner as the store, so a hard
    /// link to one passes every check except the link count.
    var victims: [String: [UInt8]] = [:]
    var rootNames: Set<String> = []
    /// Alice's valid record as enrolled in setUp.
    var goodRecord: [UInt8] = []
    static let fixedTime: Int = 1_000_000_000

    var storePath: String { fixture.store.path }
    var recordPath: String { fixture.store.appendingPathComponent(user).path }
    var statePath: String { fixture.store.appendingPathComponent(".state." + user).path }
    var lockPath: String { fixture.store.appendingPathComponent(".lock." + user).path }
    var victimRecord: String { fixture.root.appendingPathComponent("victim-record").path }
    var victimState: String { fixture.root.appendingPathComponent("victim-state").path }
    var victimPlain: String { fixture.root.appendingPathComponent("victim-plain").path }
    /// A name outside the store that must never come into existence (dangling-link target).
    var absent: String { fixture.root.appendingPathComponent("absent").path }

    /// Whether reading a file updates its atime here (relatime does when atime < ctime, which
    /// `setTimes` guarantees; noatime does not): probed once, asserted only where it holds.
    static let atimeIsReliable: Bool = {
        guard let dir = try? makeTemporaryDirectory("pam_totp_atime") else { return false }
        defer { removeTemporaryDirectory(dir) }
        let path = dir.appendingPathComponent("probe").path
        guard FileManager.default.createFile(atPath: path, contents: Data("x".utf8)) else { return false }
        setTimes(path)
        _ = try? Data(contentsOf: URL(fileURLWithPath: path))
        var st = stat()
        return lstat(path, &st) == 0 && st.st_atim.tv_sec != fixedTime
    }()

    static func setTimes(_ path: String) {
        let t = [timeval(tv_sec: fixedTime, tv_usec: 0), timeval(tv_sec: fixedTime, tv_usec: 0)]
        XCTAssertEqual(utimes(path, t), 0, path)
    }

    override func setUpWithError() throws {
        fixture = try PAMFixture()
        try fixture.service("totp", ["auth required MODULE STORE"])
        try fixture.enroll(user, secret: secret)
        // A valid state file, made by the store for a scratch user, then moved out of the store.
        let s = try store()
        let scratch = Array("scratch".utf8)
        try s.withLock(user: scratch) { () throws(MFAError) in try s.writeStateLocked(user: scratch, state: UserState()) }
        let stateBytes = try bytes(fixture.store.appendingPathComponent(".state.scratch").path)
        for name in [".state.scratch", ".lock.scratch"] {
            XCTAssertEqual(unlink(fixture.store.appendingPathComponent(name).path), 0)
        }
        // The victims: alice's own valid record and a valid state, so following a link to them
        // would authenticate; and plain text.
        goodRecord = try bytes(recordPath)
        try makeVictim(victimRecord, goodRecord)
        try makeVictim(victimState, stateBytes)
        try makeVictim(victimPlain, Array("precious\n".utf8))
        rootNames = Set(try FileManager.default.contentsOfDirectory(atPath: fixture.root.path))
        XCTAssertEqual(rootNames, ["pam.d", "store", "victim-record", "victim-state", "victim-plain"])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storePath).sorted(), [".lock.alice", "alice"])
    }

    override func tearDown() { fixture?.cleanup() }

    // MARK: - Helpers

    func store() throws -> Store { try Store(path: Array(storePath.utf8)) }

    func bytes(_ path: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path))) }

    func makeVictim(_ path: String, _ content: [UInt8]) throws {
        try writeFile(path, content)
        Self.setTimes(path)
        victims[path] = content
    }

    /// Creates `path` (O_EXCL) with `content` and `mode`.
    func writeFile(_ path: String, _ content: [UInt8], mode: mode_t = 0o600) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { XCTFail("create \(path): errno \(errno)"); throw POSIXError(.EIO) }
        defer { close(fd) }
        var done = 0
        while done < content.count {
            let n = content[done...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { XCTFail("write \(path)"); throw POSIXError(.EIO) }
            done += n
        }
        XCTAssertEqual(fchmod(fd, mode), 0)
    }

    /// Replaces whatever is at `path` (file, link, FIFO, empty directory).
    func remove(_ path: String) {
        if unlink(path) != 0 && errno == EISDIR { rmdir(path) }
    }

    func code(offsetSteps: Int64 = 0) throws -> [UInt8] { try currentCode(secret, offsetSteps: offsetSteps) }

    /// A wrong code: the current one with its last digit changed.
    func wrongCode() throws -> [UInt8] {
        var c = try code()
        c[c.count - 1] = c[c.count - 1] == 0x39 ? 0x30 : c[c.count - 1] + 1
        return c
    }

    /// One authentication on another thread, so a module that blocks (e.g. opening a FIFO
    /// without O_NONBLOCK) fails the test instead of hanging it. On timeout the FIFO at
    /// `unblock` is opened for writing and closed, which releases a reader blocked in open/read.
    func auth(_ answer: [UInt8], unblock: String? = nil, timeout: Double = 5,
              file: StaticString = #filePath, line: UInt = #line) -> Int32 {
        final class Box: @unchecked Sendable {
            var rc: Int32 = -1
            let fixture: PAMFixture
            init(_ f: PAMFixture) { fixture = f }
        }
        let box = Box(fixture), done = DispatchSemaphore(value: 0), u = user
        let thread = Thread {
            box.rc = box.fixture.authenticate(service: "totp", user: u, conversation: Conversation(answer: answer))
            done.signal()
        }
        thread.start()
        if done.wait(timeout: .now() + timeout) == .timedOut {
            XCTFail("pam_authenticate did not return within \(timeout) s (blocked?)", file: file, line: line)
            // Release it (each blocking open needs its own writer), so no thread is left behind.
            for _ in 0..<100 {
                if let unblock {
                    let fd = open(unblock, O_WRONLY | O_NONBLOCK)
                    if fd >= 0 { close(fd) }
                }
                if done.wait(timeout: .now() + 0.1) == .success { break }
            }
        }
        return box.rc
    }

    func assertDenied(_ answer: [UInt8], _ what: String, expected: Int32 = PAM_AUTHINFO_UNAVAIL,
                      unblock: String? = nil, file: StaticString = #filePath, line: UInt = #line) {
        let rc = auth(answer, unblock: unblock, file: file, line: line)
        XCTAssertNotEqual(rc, PAM_SUCCESS, "\(what): accepted", file: file, line: line)
        XCTAssertEqual(rc, expected, "\(what): \(String(cString: pam_strerror(nil, rc)))", file: file, line: line)
    }

    /// The victims are byte-for-byte, mode, owner, size, mtime and atime what they were, and
    /// nothing new appeared next to the store.
    func assertVictimsUntouched(_ what: String, file: StaticString = #filePath, line: UInt = #line) {
        for (path, content) in victims.sorted(by: { $0.key < $1.key }) {
            var st = stat()
            guard lstat(path, &st) == 0 else {
                XCTFail("\(what): victim \(path) is gone", file: file, line: line)
                continue
            }
            XCTAssertEqual(st.st_mode & UInt32(S_IFMT), UInt32(S_IFREG), "\(what): \(path) type", file: file, line: line)
            XCTAssertEqual(st.st_mode & 0o7777, 0o600, "\(what): \(path) mode", file: file, line: line)
            XCTAssertEqual(st.st_uid, geteuid(), "\(what): \(path) owner", file: file, line: line)
            XCTAssertEqual(Int(st.st_size), content.count, "\(what): \(path) size", file: file, line: line)
            XCTAssertEqual(st.st_mtim.tv_sec, Self.fixedTime, "\(what): \(path) was written", file: file, line: line)
            if Self.atimeIsReliable {
                XCTAssertEqual(st.st_atim.tv_sec, Self.fixedTime, "\(what): \(path) was read", file: file, line: line)
            }
            XCTAssertEqual(try? bytes(path), content, "\(what): \(path) content", file: file, line: line)
            Self.setTimes(path)  // our own read just now updated the atime
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: absent), "\(what): \(absent) was created", file: file, line: line)
        XCTAssertEqual(Set((try? FileManager.default.contentsOfDirectory(atPath: fixture.root.path)) ?? []), rootNames,
                       "\(what): files appeared or vanished next to the store", file: file, line: line)
    }

    /// The positive control: with `paths` removed and a clean record (and no state), the same
    /// code path accepts the current code. Proves the denials above were the hostile file's doing.
    func assertAcceptedAfterCleanup(_ paths: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        for p in paths + [statePath] { remove(p) }
        try fixture.enroll(user, secret: secret)
        XCTAssertEqual(auth(try code(), file: file, line: line), PAM_SUCCESS, "positive control", file: file, line: line)
        assertVictimsUntouched("after the positive control", file: file, line: line)
    }

    /// A valid state file for alice (no failures), written by the store.
    func makeState() throws -> [UInt8] {
        let s = try store(), u = Array(user.utf8)
        try s.withLock(user: u) { () throws(MFAError) in try s.writeStateLocked(user: u, state: UserState()) }
        return try bytes(statePath)
    }

    // MARK: - Links at the record, state and lock names

    func testSymlinkAtTheRecordNameIsNotFollowed() throws {
        remove(recordPath)
        XCTAssertEqual(symlink(victimRecord, recordPath), 0)
        assertDenied(try code(), "symlink to a valid record outside the store")
        assertVictimsUntouched("symlinked record")
        remove(recordPath)
        XCTAssertEqual(symlink(absent, recordPath), 0)
        assertDenied(try code(), "dangling symlink")
        assertVictimsUntouched("dangling symlinked record")
        try assertAcceptedAfterCleanup([recordPath])
    }

    func testHardLinkAtTheRecordNameIsRefused() throws {
        remove(recordPath)
        XCTAssertEqual(link(victimRecord, recordPath), 0)
        assertDenied(try code(), "hard link to a valid record outside the store")
        assertVictimsUntouched("hard-linked record")
        try assertAcceptedAfterCleanup([recordPath])
    }

    func testSymlinkAtTheStateNameIsNotFollowed() throws {
        XCTAssertEqual(symlink(victimState, statePath), 0)
        assertDenied(try code(), "symlink to a valid state outside the store")
        assertDenied(try wrongCode(), "wrong code: the failure must not be written through the link")
        assertVictimsUntouched("symlinked state")
        remove(statePath)
        XCTAssertEqual(symlink(absent, statePath), 0)
        assertDenied(try code(), "dangling symlink: not mistaken for a missing state")
        assertDenied(try wrongCode(), "dangling symlink, wrong code")
        assertVictimsUntouched("dangling symlinked state")
        var st = stat()
        XCTAssertEqual(lstat(statePath, &st), 0)
        XCTAssertEqual(st.st_mode & UInt32(S_IFMT), UInt32(S_IFLNK), "the link is still a link, not replaced by a state")
        try assertAcceptedAfterCleanup([statePath])
    }

    func testHardLinkAtTheStateNameIsRefused() throws {
        XCTAssertEqual(link(victimState, statePath), 0)
        assertDenied(try code(), "hard link to a valid state outside the store")
        assertDenied(try wrongCode(), "wrong code: the failure must not be written into the linked inode")
        assertVictimsUntouched("hard-linked state")
        try assertAcceptedAfterCleanup([statePath])
    }

    func testSymlinkAtTheLockNameIsNotFollowed() throws {
        remove(lockPath)
        XCTAssertEqual(symlink(victimPlain, lockPath), 0)
        assertDenied(try code(), "symlinked lock")
        assertVictimsUntouched("symlinked lock")
        remove(lockPath)
        XCTAssertEqual(symlink(absent, lockPath), 0)
        assertDenied(try code(), "dangling symlinked lock: O_CREAT must not create the target")
        assertVictimsUntouched("dangling symlinked lock")
        try assertAcceptedAfterCleanup([lockPath])
    }

    func testHardLinkAtTheLockNameIsRefused() throws {
        remove(lockPath)
        XCTAssertEqual(link(victimPlain, lockPath), 0)
        assertDenied(try code(), "hard-linked lock")
        assertVictimsUntouched("hard-linked lock")
        try assertAcceptedAfterCleanup([lockPath])
    }

    // MARK: - Links at the temp names: stale, so removed and replaced, never followed

    /// The module never writes records, so the record temp name goes through Store.write.
    func testLinksAtTheRecordTempNameAreReplacedNotFollowed() throws {
        let temp = fixture.store.appendingPathComponent(".tmp." + user).path
        let s = try store(), u = Array(user.utf8)
        let newRecord = UserRecord(factors: [
            try Factor(label: Array("new".utf8), parameters: .default, created: 1_800_000_000, secret: secret),
        ])
        for (kind, make) in [("symlink", { symlink(self.victimRecord, temp) }), ("hard link", { link(self.victimRecord, temp) }),
                             ("dangling symlink", { symlink(self.absent, temp) })] {
            XCTAssertEqual(make(), 0, kind)
            try s.write(user: u, record: newRecord)
            XCTAssertEqual(try s.read(user: u), newRecord, kind)
            var st = stat()
            XCTAssertNotEqual(lstat(temp, &st), 0, "\(kind): the stale temp is gone")
            XCTAssertEqual(lstat(victimRecord, &st), 0)
            XCTAssertEqual(st.st_nlink, 1, "\(kind): the victim is no longer linked into the store")
            XCTAssertEqual(lstat(recordPath, &st), 0)
            XCTAssertEqual(st.st_nlink, 1, "\(kind): the record is a fresh inode")
            XCTAssertEqual(st.st_mode & 0o7777, 0o600)
            assertVictimsUntouched("\(kind) at .tmp.alice")
            try s.write(user: u, record: try UserRecord.parse(goodRecord))
        }
        try assertAcceptedAfterCleanup([])
    }

    /// The module creates the state file through `.tmp..state.USER` (then renames it): a link
    /// there is a stale temp, removed and replaced. Here success is the right outcome (the
    /// state is created, the victim untouched); a directory there, which cannot be removed,
    /// makes the first state write fail, and a code whose use cannot be recorded is denied.
    func testLinksAtTheStateTempNameAreReplacedNotFollowed() throws {
        let temp = fixture.store.appendingPathComponent(".tmp..state." + user).path
        for (kind, make) in [("symlink", { symlink(self.victimState, temp) }), ("hard link", { link(self.victimState, temp) }),
                             ("dangling symlink", { symlink(self.absent, temp) })] {
            remove(statePath)  // no state yet: the module creates it (and its replay guard is fresh)
            XCTAssertEqual(make(), 0, kind)
            XCTAssertEqual(auth(try code()), PAM_SUCCESS, "\(kind): the stale temp is replaced")
            var st = stat()
            XCTAssertNotEqual(lstat(temp, &st), 0, "\(kind): the stale temp is gone")
            XCTAssertEqual(lstat(statePath, &st), 0)
            XCTAssertEqual(st.st_mode & UInt32(S_IFMT), UInt32(S_IFREG), kind)
            XCTAssertEqual(st.st_nlink, 1, kind)
            XCTAssertEqual(st.st_mode & 0o7777, 0o600, kind)
            XCTAssertNotNil(try fixture.state(user).lastStep(forLabel: Array("phone".utf8)), kind)
            XCTAssertEqual(lstat(victimState, &st), 0)
            XCTAssertEqual(st.st_nlink, 1, "\(kind): the victim is no longer linked into the store")
            assertVictimsUntouched("\(kind) at .tmp..state.alice")
        }
        remove(statePath)
        XCTAssertEqual(mkdir(temp, 0o700), 0)
        assertDenied(try code(), "directory at the state temp name: the success cannot be recorded (denied like a wrong code)",
                     expected: PAM_AUTH_ERR)
        assertDenied(try wrongCode(), "directory at the state temp name, wrong code", expected: PAM_AUTH_ERR)
        assertVictimsUntouched("directory at .tmp..state.alice")
        try assertAcceptedAfterCleanup([temp])
    }

    // MARK: - Owners and modes

    func testRecordOwnedByAnotherUserIsRefused() throws {
        try XCTSkipUnless(isRoot, "needs root to chown")
        XCTAssertEqual(chown(recordPath, 65534, 65534), 0)
        assertDenied(try code(), "record owned by 65534")
        assertVictimsUntouched("record owned by 65534")
        XCTAssertEqual(chown(recordPath, 0, 0), 0)
        XCTAssertEqual(chmod(recordPath, 0o644), 0)
        assertDenied(try code(), "record mode 0644")
        for mode: mode_t in [0o640, 0o604, 0o620, 0o602, 0o610, 0o601] {
            XCTAssertEqual(chmod(recordPath, mode), 0)
            assertDenied(try code(), "record mode \(String(mode, radix: 8))")
        }
        assertVictimsUntouched("record modes")
        try assertAcceptedAfterCleanup([])
    }

    func testStateFileWithForeignModeOrOwnerIsRefusedAndNotWritten() throws {
        let state = try makeState()
        for (what, setUp) in [("mode 0644", { chmod(self.statePath, 0o644) }),
                              ("mode 0660", { chmod(self.statePath, 0o660) }),
                              ("owner 65534", { chown(self.statePath, 65534, 65534) })] {
            if what.hasPrefix("owner") { try XCTSkipUnless(isRoot, "needs root to chown") }
            XCTAssertEqual(chmod(statePath, 0o600), 0)
            XCTAssertEqual(setUp(), 0, what)
            assertDenied(try code(), "state file \(what)")
            assertDenied(try wrongCode(), "state file \(what), wrong code")
            XCTAssertEqual(try bytes(statePath), state, "\(what): the state file was written")
        }
        assertVictimsUntouched("foreign state file")
        try assertAcceptedAfterCleanup([])
    }

    // MARK: - Size, garbage, FIFOs, directories

    func testOneGigabyteSparseRecordIsRefusedBySizeWithoutBeingRead() throws {
        for path in [recordPath, statePath] {
            remove(path)
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
            XCTAssertGreaterThanOrEqual(fd, 0)
            XCTAssertEqual(ftruncate(fd, 1 << 30), 0)
            close(fd)
            if path == statePath { try fixture.enroll(user, secret: secret) }  // a good record in front of it
            HostileFileTests.setTimes(path)
            let started = Date()
            assertDenied(try code(), "1 GB sparse file at \(path)")
            assertDenied(try wrongCode(), "1 GB sparse file at \(path), wrong code")
            let elapsed = Date().timeIntervalSince(started)
            XCTAssertLessThan(elapsed, 2, "two denials took \(elapsed) s: was the 1 GB file read?")
            var st = stat()
            XCTAssertEqual(lstat(path, &st), 0)
            XCTAssertEqual(st.st_size, 1 << 30, "not truncated or extended")
            XCTAssertLessThan(Int(st.st_blocks) * 512, 1 << 20, "still sparse: nothing was written into it")
            XCTAssertEqual(st.st_mtim.tv_sec, Self.fixedTime, "not written")
            if path == recordPath && Self.atimeIsReliable {
                XCTAssertEqual(st.st_atim.tv_sec, Self.fixedTime, "the oversized record was read instead of refused by size")
            }
            assertVictimsUntouched("1 GB sparse \(path)")
            remove(path)
            try fixture.enroll(user, secret: secret)
        }
        try assertAcceptedAfterCleanup([])
    }

    func testTruncatedRecordsAreRefused() throws {
        let good = goodRecord
        // The header and account lines alone are a valid record without factors.
        let lines = good.split(separator: 0x0A, omittingEmptySubsequences: false)
        let header = Array(lines[0]) + [0x0A] + Array(lines[1]) + [0x0A]
        for cut in [0, 1, 5, 10, header.count, header.count + 7, good.count / 2, good.count - 2, good.count - 1] {
            remove(recordPath)
            try writeFile(recordPath, Array(good[0..<cut]))
            // The header and account lines alone are a valid record without factors: not
            // enrolled, denied as such.
            assertDenied(try code(), "record cut at \(cut) of \(good.count)",
                         expected: cut == header.count ? PAM_AUTH_ERR : PAM_AUTHINFO_UNAVAIL)
        }
        assertVictimsUntouched("truncated records")
        try assertAcceptedAfterCleanup([])
    }

    func testBinaryRecordsAreRefused() throws {
        var rng = SplitMix64(seed: 0xB1A5_0001)
        for n in [1, 2, 64, 4095, 4096, 65_535, 65_536, 65_537, 300_000] {
            var garbage = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if n % 2 == 1 { garbage[n - 1] = 0x0A }  // half of them end like a text file
            remove(recordPath)
            try writeFile(recordPath, garbage)
            assertDenied(try code(), "\(n) random bytes")
        }
        // Binary after a valid header and factor line.
        let good = goodRecord
        remove(recordPath)
        try writeFile(recordPath, good + [0x00, 0xFF, 0x0A])
        assertDenied(try code(), "valid record plus a binary line")
        remove(recordPath)
        try writeFile(recordPath, Array(good.dropLast()) + [0x00, 0x0A])
        assertDenied(try code(), "NUL at the end of the secret")
        assertVictimsUntouched("binary records")
        try assertAcceptedAfterCleanup([])
    }

    func testOverlongRecordsAreRefused() throws {
        let good = goodRecord
        let cases: [(String, [UInt8])] = [
            ("one 70,000-byte line", Array("pam_totp 1\nfactor ".utf8) + [UInt8](repeating: 0x61, count: 70_000) + [0x0A]),
            ("a 64,000-character secret under the size limit",
             Array("pam_totp 1\nfactor phone sha1 6 30 1 ".utf8) + [UInt8](repeating: 0x41, count: 64_000) + [0x0A]),
            ("a 60,000-byte label", Array("pam_totp 1\nfactor ".utf8) + [UInt8](repeating: 0x62, count: 60_000)
                + Array(" sha1 6 30 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n".utf8)),
            ("valid record padded past 64 KiB with a comment-like line",
             good + Array("factor ".utf8) + [UInt8](repeating: 0x20, count: 66_000) + [0x0A]),
            ("a huge number", Array("pam_totp 1\nfactor phone sha1 6 ".utf8) + [UInt8](repeating: 0x39, count: 5_000)
                + Array(" 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n".utf8)),
            ("exactly 64 KiB + 1", good + [UInt8](repeating: 0x0A, count: UserRecord.maxSize + 1 - good.count)),
        ]
        for (what, content) in cases {
            remove(recordPath)
            try writeFile(recordPath, content)
            assertDenied(try code(), what)
        }
        assertVictimsUntouched("overlong records")
        try assertAcceptedAfterCleanup([])
    }

    func testFIFOsAndDirectoriesInTheStoreAreRefusedWithoutHanging() throws {
        _ = try makeState()
        for path in [recordPath, statePath, lockPath] {
            let saved = path == lockPath ? nil : try bytes(path)
            remove(path)
            XCTAssertEqual(mkfifo(path, 0o600), 0)
            assertDenied(try code(), "FIFO at \(path)", unblock: path)
            assertDenied(try wrongCode(), "FIFO at \(path), wrong code", unblock: path)
            remove(path)
            XCTAssertEqual(mkdir(path, 0o700), 0)
            assertDenied(try code(), "directory at \(path)")
            remove(path)
            if let saved { try writeFile(path, saved) }
        }
        assertVictimsUntouched("FIFOs and directories")
        try assertAcceptedAfterCleanup([])
    }

    func testSymlinkedOrForeignStoreDirectoryIsRefused() throws {
        let link = fixture.root.appendingPathComponent("store-link").path
        XCTAssertEqual(symlink(storePath, link), 0)
        rootNames.insert("store-link")
        try fixture.service("totp", ["auth required MODULE store=" + link])
        assertDenied(try code(), "store path is a symlink")
        // "link/" would resolve through the link despite O_NOFOLLOW; Store drops trailing slashes.
        try fixture.service("totp", ["auth required MODULE store=" + link + "/"])
        assertDenied(try code(), "store path is a symlink, written with a trailing slash")
        try fixture.service("totp", ["auth required MODULE store=" + link + "///"])
        assertDenied(try code(), "store path is a symlink, written with trailing slashes")
        try fixture.service("totp", ["auth required MODULE STORE"])
        if isRoot {
            XCTAssertEqual(chown(storePath, 65534, 65534), 0)
            assertDenied(try code(), "store owned by 65534")
            XCTAssertEqual(chown(storePath, 0, 0), 0)
        }
        assertVictimsUntouched("store directory")
        try assertAcceptedAfterCleanup([])
    }
}
