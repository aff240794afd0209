import XCTest
import TestSupport
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

final class StoreTests: XCTestCase {
    var root: URL!
    var storeURL: URL!
    let user = Array("alice".utf8)

    override func setUpWithError() throws {
        root = try makeTemporaryDirectory()
        storeURL = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(storeURL.path, 0o700), 0)
    }

    override func tearDown() { removeTemporaryDirectory(root) }

    func store(timeout: Int = 5_000) throws -> Store {
        try Store(path: Array(storeURL.path.utf8), lockTimeoutMilliseconds: timeout)
    }

    func sampleRecord() throws -> UserRecord {
        UserRecord(factors: [
            try Factor(label: Array("phone 100% mine".utf8), parameters: .default, created: 1_700_000_000,
                       secret: Array("12345678901234567890".utf8)),
            try Factor(label: Array("tablet".utf8), parameters: try OTPParameters(algorithm: .sha512, digits: 8, period: 60),
                       created: 1_700_000_001, secret: [UInt8](repeating: 7, count: 64)),
        ])
    }

    var recordPath: String { storeURL.appendingPathComponent("alice").path }

    func write(_ text: String, mode: mode_t = 0o600, to path: String? = nil) {
        let p = path ?? recordPath
        XCTAssertTrue(FileManager.default.createFile(atPath: p, contents: Data(text.utf8)))
        XCTAssertEqual(chmod(p, mode), 0)
    }

    func assertInsecure(_ file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try store().read(user: user), file: file, line: line) { error in
            guard case .insecureStore = error as? MFAError else { return XCTFail("\(error)", file: file, line: line) }
        }
    }

    func assertCorrupt(_ file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try store().read(user: user), file: file, line: line) { error in
            guard case .corruptRecord = error as? MFAError else { return XCTFail("\(error)", file: file, line: line) }
        }
    }

    func testWriteReadRoundTripWithSafePermissions() throws {
        let s = try store()
        XCTAssertNil(try s.read(user: user))
        let record = try sampleRecord()
        try s.write(user: user, record: record)
        XCTAssertEqual(try s.read(user: user), record)
        let attrs = try FileManager.default.attributesOfItem(atPath: recordPath)
        XCTAssertEqual((attrs[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        let names = try FileManager.default.contentsOfDirectory(atPath: storeURL.path).sorted()
        XCTAssertEqual(names, [".lock.alice", "alice"], "no temp file left behind")
        // The format is the documented, versioned text.
        let text = try String(contentsOfFile: recordPath, encoding: .utf8)
        XCTAssertTrue(text.hasPrefix("pam_totp 2\naccount - 0000000000000000\nfactor phone%20100%25%20mine sha1 6 30 1700000000 0 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n"), text)
    }

    /// Records written before the account line existed (version 1) are still read: no uid
    /// (bound at their next change), no record id, no enrolment step.
    func testVersion1RecordIsStillRead() throws {
        let v1 = "pam_totp 1\nfactor phone%20100%25%20mine sha1 6 30 1700000000 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n"
        let r = try UserRecord.parse(Array(v1.utf8))
        XCTAssertNil(r.uid)
        XCTAssertEqual(r.id, 0)
        XCTAssertEqual(r.factors.map(\.data.enrolledStep), [0])
        XCTAssertEqual(r.factors.first?.otpKey?.secret, Array("12345678901234567890".utf8))
        XCTAssertTrue(r.belongs(toAccount: 1000))
        // A bound version-2 record belongs to its uid only.
        var bound = r
        bound.uid = 1000
        bound.id = 0x0123_4567_89AB_CDEF
        let again = try UserRecord.parse(bound.serialized())
        XCTAssertEqual(again, bound)
        XCTAssertTrue(again.belongs(toAccount: 1000))
        XCTAssertFalse(again.belongs(toAccount: 1001))
        XCTAssertFalse(again.belongs(toAccount: nil))
    }

    func testUmaskDoesNotWidenOrNarrowTheRecordMode() throws {
        let old = umask(0o077)
        defer { umask(old) }
        try store().write(user: user, record: try sampleRecord())
        XCTAssertEqual(try store().read(user: user), try sampleRecord())
    }

    func testStaleTempFileFromACrashIsReplaced() throws {
        write("garbage", to: storeURL.appendingPathComponent(".tmp.alice").path)
        try store().write(user: user, record: try sampleRecord())
        XCTAssertEqual(try store().read(user: user), try sampleRecord())
        XCTAssertFalse(FileManager.default.fileExists(atPath: storeURL.appendingPathComponent(".tmp.alice").path))
    }

    func testSymlinkedRecordIsRefused() throws {
        let outside = root.appendingPathComponent("outside")
        write(String(decoding: try sampleRecord().serialized(), as: UTF8.self), to: outside.path)
        XCTAssertEqual(symlink(outside.path, recordPath), 0)
        assertInsecure()
    }

    func testHardLinkedRecordIsRefused() throws {
        let outside = root.appendingPathComponent("outside")
        write(String(decoding: try sampleRecord().serialized(), as: UTF8.self), to: outside.path)
        XCTAssertEqual(link(outside.path, recordPath), 0)
        assertInsecure()
    }

    func testGroupOrOtherReadableRecordIsRefused() throws {
        write(String(decoding: try sampleRecord().serialized(), as: UTF8.self), mode: 0o644)
        assertInsecure()
        XCTAssertEqual(chmod(recordPath, 0o640), 0)
        assertInsecure()
    }

    func testRecordOwnedBySomeoneElseIsRefused() throws {
        try XCTSkipUnless(isRoot, "needs root to chown")
        write(String(decoding: try sampleRecord().serialized(), as: UTF8.self))
        XCTAssertEqual(chown(recordPath, 65534, 65534), 0)
        assertInsecure()
    }

    func testDirectoryAndFIFOAtTheRecordNameAreRefused() throws {
        XCTAssertEqual(mkfifo(recordPath, 0o600), 0)
        assertInsecure()  // and did not block on the FIFO
        XCTAssertEqual(unlink(recordPath), 0)
        XCTAssertEqual(mkdir(recordPath, 0o700), 0)
        XCTAssertThrowsError(try store().read(user: user))
    }

    func testInsecureStoreDirectoryIsRefused() throws {
        XCTAssertEqual(chmod(storeURL.path, 0o755), 0)
        XCTAssertThrowsError(try store()) { error in
            guard case .insecureStore = error as? MFAError else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(chmod(storeURL.path, 0o700), 0)
        let link = root.appendingPathComponent("link")
        XCTAssertEqual(symlink(storeURL.path, link.path), 0)
        XCTAssertThrowsError(try Store(path: Array(link.path.utf8))) { error in
            guard case .insecureStore = error as? MFAError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try Store(path: Array("relative/store".utf8)))
    }

    func testSymlinkAtLockOrTempNameIsNotFollowed() throws {
        let victim = root.appendingPathComponent("victim")
        write("precious\n", to: victim.path)
        XCTAssertEqual(symlink(victim.path, storeURL.appendingPathComponent(".lock.alice").path), 0)
        XCTAssertThrowsError(try store().write(user: user, record: try sampleRecord()))
        XCTAssertEqual(unlink(storeURL.appendingPathComponent(".lock.alice").path), 0)
        XCTAssertEqual(symlink(victim.path, storeURL.appendingPathComponent(".tmp.alice").path), 0)
        try store().write(user: user, record: try sampleRecord())  // the stale link is removed, not followed
        XCTAssertEqual(try String(contentsOfFile: victim.path, encoding: .utf8), "precious\n")
        XCTAssertEqual(try store().read(user: user), try sampleRecord())
    }

    func testCorruptRecordsAreRefused() throws {
        let good = String(decoding: try sampleRecord().serialized(), as: UTF8.self)
        let cases = [
            "", String(good.dropLast()), String(good.prefix(30)), "pam_totp 2\n", "pam_totp\n",
            "pam_totp 1\nfactor x sha1 6 30 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\nunknown line\n",
            "pam_totp 1\nfactor x sha1 6 30 1\n",
            "pam_totp 1\nfactor x md5 6 30 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n",
            "pam_totp 1\nfactor x sha1 9 30 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n",
            "pam_totp 1\nfactor x sha1 6 0 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n",
            "pam_totp 1\nfactor x sha1 6 30 1 GEZD0NBV\n",
            "pam_totp 1\nfactor x sha1 6 30 1 MZXW6\n",
            "pam_totp 1\nfactor x  sha1 6 30 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n",
            "pam_totp 1\nfactor x sha1 6 30 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\nfactor x sha1 6 30 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n",
            "\u{0}\u{1}\u{2}binary\u{ff}\n",
            "pam_totp 1\nfactor " + String(repeating: "a", count: 70_000) + "\n",
        ]
        for text in cases {
            write(text)
            assertCorrupt()
        }
        // Random binary never crashes and never parses.
        var rng = SplitMix64(seed: 99)
        for n in [1, 17, 4096, 65_536, 65_537] {
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            XCTAssertThrowsError(try UserRecord.parse(bytes))
        }
    }

    func testLockTimeoutWhileAnotherHolderHasTheLock() throws {
        let s = try store(timeout: 200)
        try s.write(user: user, record: try sampleRecord())
        let fd = open(storeURL.appendingPathComponent(".lock.alice").path, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(flock(fd, LOCK_EX), 0)
        XCTAssertThrowsError(try s.write(user: user, record: UserRecord())) { error in
            XCTAssertEqual(error as? MFAError, .lockTimeout)
        }
        close(fd)
        try s.write(user: user, record: UserRecord())
        XCTAssertEqual(try s.read(user: user), UserRecord())
    }

    func testUserNamesThatCannotNameARecord() throws {
        for bad in ["", ".lock.alice", "..", "a/b", "a b", "a\u{0}b", "a\nb", String(repeating: "x", count: 129)] {
            XCTAssertThrowsError(try Store.validate(user: Array(bad.utf8)), bad)
            XCTAssertThrowsError(try store().read(user: Array(bad.utf8)), bad)
        }
        for good in ["alice", "a.b", "DOMAIN\\user", "user@realm", "host$", "x"] {
            XCTAssertNoThrow(try Store.validate(user: Array(good.utf8)), good)
        }
    }
}

/// FileStore.users: the records of the store, never its lock, state or temp files.
final class StoreListingTests: XCTestCase {
    func testUsersListsRecordsOnlyInByteOrder() throws {
        let root = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(root) }
        XCTAssertEqual(chmod(root.path, 0o700), 0)
        let store = try Store(path: Array(root.path.utf8))
        XCTAssertEqual(try store.users(), [])
        let record = UserRecord(factors: [try Factor(label: Array("phone".utf8), parameters: .default, created: 1,
                                                     secret: Array("12345678901234567890".utf8))])
        for name in ["zoe", "Bob", "alice", "al.ice"] { try store.write(user: Array(name.utf8), record: record) }
        var s = UserState()
        s.failures = 1
        let alice = Array("alice".utf8)
        try store.withLock(user: alice) { () throws(MFAError) in try store.writeStateLocked(user: alice, state: s) }
        XCTAssertTrue(FileManager.default.createFile(atPath: root.appendingPathComponent(".tmp.zoe").path, contents: Data()))
        XCTAssertEqual(try store.users().map { String(decoding: $0, as: UTF8.self) }, ["Bob", "al.ice", "alice", "zoe"])
        XCTAssertTrue(FileManager.default.fileExists(atPath: root.appendingPathComponent(".lock.alice").path))
        XCTAssertTrue(FileManager.default.fileExists(atPath: root.appendingPathComponent(".state.alice").path))
        // Listing twice gives the same (the stream is rewound, the store's descriptor untouched).
        XCTAssertEqual(try store.users().count, 4)
        XCTAssertNotNil(try store.read(user: alice))
    }
}
