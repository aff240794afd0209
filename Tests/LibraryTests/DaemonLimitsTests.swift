import Foundation
import MFADaemon
import TestSupport
import XCTest

/// pam-totpd's sharing rules (MFADaemon's Limits.swift) in memory, without a socket: the counts
/// behind its connection and queue limits, the log budget, and whose a subordinate uid is.
final class DaemonLimitsTests: XCTestCase {
    /// Root's reserve: callers other than root stop `forRootOnly` short of the total; root (sshd,
    /// su, sudo) still gets the rest, and nobody gets past the total.
    func testRootKeepsItsReserveAndNobodyPassesTheTotal() {
        var q = Quota(total: 10, forRootOnly: 3, perUser: 100)
        var taken = 0
        for uid in UInt32(1000)..<1100 where q.take(uid: uid) { taken += 1 }
        XCTAssertEqual(taken, 7, "users stop at total - forRootOnly")
        XCTAssertTrue(q.take(uid: 0)); XCTAssertTrue(q.take(uid: 0)); XCTAssertTrue(q.take(uid: 0))
        XCTAssertFalse(q.take(uid: 0), "not even root past the total")
        XCTAssertEqual(q.used, 10)
        q.give(uid: 1000)
        XCTAssertFalse(q.take(uid: 1001), "a user waits while what is in use reaches into root's reserve")
        XCTAssertTrue(q.take(uid: 0), "the slot given back is root's again")
        for _ in 0..<4 { q.give(uid: 0) }
        XCTAssertTrue(q.take(uid: 1001), "below the reserve, users are served again")
    }

    /// One user's flood stops at `perUser`; another user is still served, and a trusted caller
    /// gets `share` times a user's part, never root's reserve.
    func testOneUserIsCappedAndATrustedCallerGetsItsShare() {
        var q = Quota(total: 100, forRootOnly: 10, perUser: 4, larger: [993], share: 3)
        XCTAssertEqual((0..<10).filter { _ in q.take(uid: 1000) }.count, 4)
        XCTAssertTrue(q.take(uid: 1001), "another user is served")
        XCTAssertEqual((0..<20).filter { _ in q.take(uid: 993) }.count, 12, "3 × 4 for the trusted caller")
        for _ in 0..<4 { q.give(uid: 1000) }
        XCTAssertEqual((0..<10).filter { _ in q.take(uid: 1000) }.count, 4, "its own slots come back once given")
        var small = Quota(total: 20, forRootOnly: 10, perUser: 100, larger: [993], share: 100)
        XCTAssertEqual((0..<50).filter { _ in small.take(uid: 993) }.count, 10, "a trusted caller never takes root's reserve")
    }

    /// A minute's log lines: `perUser` for one uid, `total` in all; the rest are counted and
    /// said in one summary line at the first line of the next minute.
    func testTheLogBudgetCountsWhatItDropsAndSaysItOnce() {
        var b = LogBudget()
        var allowed = 0
        for _ in 0..<30 where b.spend(uid: 1000, now: 100, perUser: 20, total: 300).allowed { allowed += 1 }
        XCTAssertEqual(allowed, 20)
        XCTAssertTrue(b.spend(uid: 1001, now: 110, perUser: 20, total: 300).allowed, "another uid has its own lines")
        let next = b.spend(uid: 1000, now: 160, perUser: 20, total: 300)
        XCTAssertTrue(next.allowed, "a new minute")
        XCTAssertEqual(next.summary, "10 more log lines caused by callers were suppressed in the last minute (uid 1000: 10)")
        XCTAssertNil(b.spend(uid: 1000, now: 161, perUser: 20, total: 300).summary, "said once")
        var all = LogBudget()
        let lines = (UInt32(0)..<50).flatMap { uid in (0..<10).map { _ in all.spend(uid: 2000 + uid, now: 0, perUser: 20, total: 300).allowed } }
        XCTAssertEqual(lines.filter { $0 }.count, 300, "no more than the total in a minute, whoever causes them")
    }

    /// /etc/subuid's `owner:first:count` lines: a uid in a range is its owner's (by name or by
    /// uid), root never owns one, a malformed line is skipped, and a changed file is read again.
    func testASubordinateUIDIsItsOwnersAndTheFileIsReadAgainWhenItChanges() throws {
        let dir = try makeTemporaryDirectory("subuid")
        defer { removeTemporaryDirectory(dir) }
        let file = dir.appendingPathComponent("subuid")
        let nobody = try XCTUnwrap(getpwnam("nobody")).pointee.pw_uid
        try "1000:100000:65536\nnobody:200000:10\nroot:300000:10\nbroken line\n1001:x:5\n".write(to: file, atomically: true, encoding: .utf8)
        let ids = SubordinateIDs(path: file.path)
        XCTAssertEqual(ids.owner(of: 100_000), 1000)
        XCTAssertEqual(ids.owner(of: 165_535), 1000)
        XCTAssertNil(ids.owner(of: 165_536))
        XCTAssertEqual(ids.owner(of: 200_009), nobody)
        XCTAssertNil(ids.owner(of: 300_000), "root owns no range")
        XCTAssertNil(ids.owner(of: 1000), "a uid outside every range is nobody's")
        try "1002:100000:10\n".write(to: file, atomically: true, encoding: .utf8)
        XCTAssertEqual(ids.owner(of: 100_000), 1002, "the file changed: read again")
        XCTAssertNil(ids.owner(of: 100_010))
        try FileManager.default.removeItem(at: file)
        XCTAssertNil(ids.owner(of: 100_000), "no file: no ranges")
    }
}
