import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The store on a full filesystem and on a read-only one, through the real libpam
/// (pam_start_confdir, in process). The store is a small tmpfs mounted for each test (root
/// only; unmounted in tearDown). Documented behaviour:
/// - The state file is rewritten in place, in blocks it already has: on a FULL filesystem a
///   user who already has a state file still logs in, the replay guard still works, and wrong
///   codes are still counted.
/// - A user without a state file cannot get one on a full filesystem: their valid code is
///   denied with PAM_AUTHINFO_UNAVAIL, because its use cannot be recorded (fail closed).
/// - On a READ-ONLY store every login is denied with PAM_AUTHINFO_UNAVAIL, wrong codes included.
final class DiskTests: XCTestCase {
    var fixture: PAMFixture!
    var mounted = false
    let secretA = Array("12345678901234567890".utf8)
    let secretB = Array("abcdefghijabcdefghij".utf8)
    let userA = "alice"   // has a state file before the disk fills up
    let userB = "bob"     // enrolled (record and lock file), but no state file yet

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "mounting a tmpfs store needs root")
        fixture = try PAMFixture()
        let r = try runCommand(["mount", "-t", "tmpfs", "-o", "size=256k,nr_inodes=64,mode=0700,uid=0,gid=0",
                                "tmpfs", fixture.store.path])
        guard r.status == 0 else {
            // Not a skip: these tests are the only check of the full-disk behaviour.
            XCTFail("cannot mount a tmpfs at \(fixture.store.path) (status \(r.status)): \(r.stderr)"
                    + " — DiskTests need root with CAP_SYS_ADMIN (mount permitted)")
            throw MountError()
        }
        mounted = true
        try fixture.service("totp", ["auth required MODULE STORE"])
        try fixture.enroll(userA, secret: secretA)
        try fixture.enroll(userB, secret: secretB)
        awayFromStepBoundary(margin: 5)
    }

    override func tearDown() {
        if mounted, let fixture {
            if (try? runCommand(["umount", fixture.store.path]))?.status != 0 {
                let lazy = try? runCommand(["umount", "-l", fixture.store.path])
                XCTAssertEqual(lazy?.status, 0, "could not unmount \(fixture.store.path): \(lazy?.stderr ?? "")")
            }
            mounted = false
        }
        fixture?.cleanup()
    }

    // MARK: - Helpers

    func auth(_ user: String, _ answer: [UInt8]) -> Int32 {
        fixture.authenticate(service: "totp", user: user, conversation: Conversation(answer: answer))
    }

    func code(_ secret: [UInt8], _ offset: Int64) throws -> [UInt8] { try currentCode(secret, offsetSteps: offset) }

    /// A 6-digit code that matches nothing in the ±6 step window of either secret.
    func wrongCode() throws -> [UInt8] {
        let window = try Set((-6...6).flatMap { o in [try code(secretA, Int64(o)), try code(secretB, Int64(o))] })
        var n = 271_828
        while window.contains(Array(String(format: "%06d", n).utf8)) { n = (n + 1) % 1_000_000 }
        return Array(String(format: "%06d", n).utf8)
    }

    var storePath: String { fixture.store.path }

    func exists(_ name: String) -> Bool {
        var st = stat()
        return lstat(storePath + "/" + name, &st) == 0
    }

    func contents(_ name: String) -> Data? { FileManager.default.contents(atPath: storePath + "/" + name) }

    func freeSpace() -> (blocks: UInt64, inodes: UInt64) {
        var s = statvfs()
        XCTAssertEqual(statvfs(storePath, &s), 0)
        return (UInt64(s.f_bavail), UInt64(s.f_favail))
    }

    /// Fills the store's filesystem: data until ENOSPC (big writes, then single bytes), then,
    /// if `inodes`, empty files until no inode is left. Names start with '.', which no user's can.
    func fill(inodes: Bool) throws {
        let fd = open(storePath + "/.filler", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        for chunk in [65_536, 4_096, 1] {
            let bytes = [UInt8](repeating: 0, count: chunk)
            while true {
                let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, chunk) }
                if n > 0 { continue }
                XCTAssertEqual(errno, ENOSPC, "filling: unexpected errno")
                break
            }
        }
        XCTAssertEqual(fsync(fd), 0)
        if inodes {
            var i = 0
            while i < 100_000 {
                let f = open(storePath + "/.inode.\(i)", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                if f < 0 { XCTAssertEqual(errno, ENOSPC, "filling inodes: unexpected errno"); break }
                close(f)
                i += 1
            }
        }
        let free = freeSpace()
        XCTAssertEqual(free.blocks, 0, "no data block is left")
        if inodes { XCTAssertEqual(free.inodes, 0, "no inode is left") }
        // Really full: a new one-byte file cannot be written.
        let probe = open(storePath + "/.probe", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        if probe >= 0 {
            var byte: UInt8 = 1
            XCTAssertEqual(write(probe, &byte, 1), -1, "a new file still gets a block")
            close(probe)
            unlink(storePath + "/.probe")
        }
    }

    func unfill() {
        unlink(storePath + "/.filler")
        for i in 0..<100_000 where unlink(storePath + "/.inode.\(i)") != 0 { break }
    }

    // MARK: - Full filesystem

    /// A user whose state file exists: valid code accepted, the replay guard and the failure
    /// count still work, with no free block and no free inode.
    func testFullFilesystem_UserWithStateLogsInReplayGuardAndFailuresWork() throws {
        XCTAssertEqual(auth(userA, try code(secretA, -3)), PAM_SUCCESS, "first login creates the state file")
        XCTAssertTrue(exists(".state." + userA))
        let before = try fixture.state(userA)
        let beforeStep = try XCTUnwrap(before.lastStep(forLabel: Array("phone".utf8)))
        let size = contents(".state." + userA)?.count

        try fill(inodes: true)

        let good = try code(secretA, -1)
        XCTAssertEqual(auth(userA, good), PAM_SUCCESS, "a user with a state file logs in on a full disk")
        let afterLogin = try fixture.state(userA)
        XCTAssertGreaterThan(try XCTUnwrap(afterLogin.lastStep(forLabel: Array("phone".utf8))), beforeStep,
                             "the accepted step was recorded")
        XCTAssertEqual(afterLogin.failures, 0)
        XCTAssertEqual(auth(userA, good), PAM_AUTH_ERR, "replay guard on a full disk")
        XCTAssertEqual(auth(userA, try wrongCode()), PAM_AUTH_ERR, "wrong code on a full disk")
        XCTAssertEqual(try fixture.state(userA).failures, 2, "the replay and the wrong code were both counted")
        XCTAssertEqual(auth(userA, try code(secretA, 1)), PAM_SUCCESS, "a later step still works")
        XCTAssertEqual(try fixture.state(userA).failures, 0, "and resets the count (recorded)")

        XCTAssertEqual(contents(".state." + userA)?.count, size, "rewritten in place, same size")
        XCTAssertFalse(exists(".tmp..state." + userA), "no temp file left")
        let free = freeSpace()
        XCTAssertEqual(free.blocks, 0)
        XCTAssertEqual(free.inodes, 0)
    }

    /// A user without a state file: their valid code is denied with PAM_AUTHINFO_UNAVAIL
    /// because its use cannot be recorded — with only the data blocks used up, and with the
    /// inodes used up too. The code is not consumed: once there is space, the same code works.
    func testFullFilesystem_UserWithoutStateIsDeniedFailClosed() throws {
        XCTAssertTrue(exists(".lock." + userB), "enrolment created the lock file")
        XCTAssertFalse(exists(".state." + userB))
        let good = try code(secretB, 0)

        try fill(inodes: false)
        // Denied exactly like a wrong code (docs/ARCHITECTURE.md, section 4.1): a different answer for the
        // right code would tell whoever filled the disk that it is right.
        XCTAssertEqual(auth(userB, good), PAM_AUTH_ERR, "no block for a new state file: denied like a wrong code")
        XCTAssertFalse(exists(".state." + userB), "no partial state file")
        XCTAssertFalse(exists(".tmp..state." + userB), "no temp file left")
        XCTAssertEqual(auth(userB, try wrongCode()), PAM_AUTH_ERR, "a wrong code is still just wrong")
        XCTAssertFalse(exists(".state." + userB))

        try fill(inodes: true)
        XCTAssertEqual(auth(userB, good), PAM_AUTH_ERR, "no inode for a new state file: denied like a wrong code")
        XCTAssertFalse(exists(".state." + userB))
        XCTAssertFalse(exists(".tmp..state." + userB))

        unfill()
        XCTAssertEqual(auth(userB, good), PAM_SUCCESS, "the denied code was not used up")
        XCTAssertTrue(exists(".state." + userB))
        XCTAssertEqual(auth(userB, good), PAM_AUTH_ERR, "now it is")
    }

    // MARK: - Read-only store

    /// On a read-only store no login succeeds: no lock, no state write, so no code can be
    /// recorded as used. Nothing changes on disk, and the codes are not used up.
    func testReadOnlyStore_EveryLoginDenied() throws {
        XCTAssertEqual(auth(userA, try code(secretA, -2)), PAM_SUCCESS, "state file for A")
        let stateBefore = contents(".state." + userA)
        XCTAssertNotNil(stateBefore)
        let goodA = try code(secretA, 0), goodB = try code(secretB, 0)

        let ro = try runCommand(["mount", "-o", "remount,ro", storePath])
        XCTAssertEqual(ro.status, 0, "remount read-only: \(ro.stderr)")
        XCTAssertEqual(open(storePath + "/.probe", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600), -1)
        XCTAssertEqual(errno, EROFS, "the store is read-only")

        XCTAssertEqual(auth(userA, goodA), PAM_AUTHINFO_UNAVAIL, "valid code, user with state")
        XCTAssertEqual(auth(userB, goodB), PAM_AUTHINFO_UNAVAIL, "valid code, user without state")
        let wrongA = auth(userA, try wrongCode()), wrongB = auth(userB, try wrongCode())
        XCTAssertNotEqual(wrongA, PAM_SUCCESS)
        XCTAssertNotEqual(wrongB, PAM_SUCCESS)
        XCTAssertEqual(wrongA, PAM_AUTHINFO_UNAVAIL, "wrong code, user with state")
        XCTAssertEqual(wrongB, PAM_AUTHINFO_UNAVAIL, "wrong code, user without state")
        XCTAssertEqual(contents(".state." + userA), stateBefore, "nothing written")
        XCTAssertFalse(exists(".state." + userB))

        let rw = try runCommand(["mount", "-o", "remount,rw", storePath])
        XCTAssertEqual(rw.status, 0, "remount read-write: \(rw.stderr)")
        XCTAssertEqual(auth(userA, goodA), PAM_SUCCESS, "the denied code was not used up")
        XCTAssertEqual(auth(userB, goodB), PAM_SUCCESS, "the denied code was not used up")
        XCTAssertEqual(try fixture.state(userA).failures, 0)
    }
}

private struct MountError: Error {}
