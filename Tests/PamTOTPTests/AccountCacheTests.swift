import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// pam-totpd's account cache (pam-totpd Accounts.swift): with 100,000 accounts in /etc/passwd
/// a request for the last one is answered from the file read once, and a change to the file is
/// seen at the next request. The daemon runs in a private mount namespace over a copy of /etc
/// (nothing on the system changes), as `make bench-fleet` runs it.
final class AccountCacheTests: XCTestCase {
    func testOneHundredThousandAccountsAndAChangedUIDSeenAtTheNextRequest() throws {
        try XCTSkipUnless(isRoot, "a mount namespace and pam-totpd's socket as root")
        let daemon = try DaemonFixture()
        defer { daemon.cleanup() }
        let etc = daemon.root.appendingPathComponent("etc").path
        let copied = try runCommand(["sh", "-c", copyTreeShell + "copy_tree /etc \"$0\"", etc])
        XCTAssertEqual(copied.status, 0, copied.stderr)
        let base = try String(contentsOfFile: "/etc/passwd", encoding: .utf8)
        func writePasswd(lastUID: Int) throws {
            var text = base
            text.reserveCapacity(base.utf8.count + 6_000_000)
            for i in 0..<99_999 { text += "ptcfill\(i):x:\(300_000 + i):\(300_000 + i)::/nonexistent:/usr/sbin/nologin\n" }
            text += "ptclast:x:\(lastUID):\(lastUID)::/nonexistent:/usr/sbin/nologin\n"
            // Renamed into place, as useradd and vipw do.
            try text.write(toFile: etc + "/passwd.new", atomically: false, encoding: .utf8)
            XCTAssertEqual(rename(etc + "/passwd.new", etc + "/passwd"), 0)
        }
        try writePasswd(lastUID: 299_999)
        let secret = randomTOTPSecret()
        try daemon.enroll("ptclast", uid: 299_999, secret: secret)
        try daemon.start(launcher: ["/usr/bin/unshare", "-m", "--propagation", "private", "sh", "-c",
                                    "mount --bind \"$0\" /etc && exec \"$@\"", etc])
        func ask(_ answer: String) throws -> DaemonReply {
            var o = ModuleOptions()
            o.store = Array(daemon.store.utf8)
            o.maxFailures = 100
            o.lockoutSeconds = 0
            let frame = try XCTUnwrap(DaemonRequest(operation: .authenticate, service: Array("cache-test".utf8),
                                                    user: Array("ptclast".utf8), options: o, answer: Array(answer.utf8)).encoded())
            let fd = DaemonTests.connectTo(daemon.socketPath)
            guard fd >= 0 else { throw DaemonFixture.DaemonError.didNotStart("connect", output: daemon.output) }
            defer { close(fd) }
            _ = DaemonTests.send(fd, frame)
            return try DaemonReply.decode(try XCTUnwrap(DaemonTests.readAll(fd)))
        }
        // The account is found at the end of the file (its record is bound to uid 299999).
        let first = try ask(try codeNow(secret))
        guard case .outcome(.success) = first else { return XCTFail("\(first) " + daemon.output) }
        // Wrong codes: each asks for the account; timed for the log, not asserted.
        let start = Date()
        for i in 0..<50 {  // under the hard cap of 100 consecutive failures
            let reply = try ask(try codeOutsideWindow(secret))
            guard case .outcome(.wrongCode) = reply else { return XCTFail("request \(i): \(reply) " + daemon.output) }
        }
        print("account cache: 50 requests for the last of 100,000 accounts in \(String(format: "%.2f", Date().timeIntervalSince(start))) s")
        // The uid changes in the file: the next request sees it (the record is another account's).
        try writePasswd(lastUID: 299_998)
        guard case .outcome(.unenrolled) = try ask(try codeOutsideWindow(secret)) else {
            return XCTFail("the changed uid was not seen: " + daemon.output)
        }
        try writePasswd(lastUID: 299_999)
        guard case .outcome(.wrongCode) = try ask(try codeOutsideWindow(secret)) else { return XCTFail("changed back") }
        // The account leaves the file: NSS is asked, and has no such account.
        try base.write(toFile: etc + "/passwd.new", atomically: false, encoding: .utf8)
        XCTAssertEqual(rename(etc + "/passwd.new", etc + "/passwd"), 0)
        guard case .outcome(.unenrolled) = try ask(try codeOutsideWindow(secret)) else { return XCTFail("a removed account") }
    }
}
