@testable import MFADaemon
@testable import MFAImport
@testable import MFAPamStacks
import XCTest

/// pam-totpd's account cache reads /etc/passwd as glibc's `files` source does, or not at all.
final class PasswdFileTests: XCTestCase {
    func parse(_ text: String) -> PasswdFile? { PasswdFile(parsing: Array(text.utf8)) }

    func testEntriesTheFirstLineOfANameWinsAndEmptyLinesAreSkipped() throws {
        let file = try XCTUnwrap(parse("""
            root:x:0:0:root:/root:/bin/bash

            alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash
            alice:x:2000:2000::/home/alice2:/bin/sh
            nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
            big:x:4294967295:1::/:
            """))
        XCTAssertEqual(file.uids[Array("root".utf8)], 0)
        XCTAssertEqual(file.uids[Array("alice".utf8)], 1000, "glibc returns the first line with the name")
        XCTAssertEqual(file.uids[Array("nobody".utf8)], 65534)
        XCTAssertEqual(file.uids[Array("big".utf8)], UInt32.max)
        XCTAssertNil(file.uids[Array("Alice".utf8)], "names are compared exactly")
        XCTAssertEqual(file.uids.count, 4)
        XCTAssertEqual(parse("")?.uids.count, 0)
    }

    /// Anything glibc might read differently turns the cache off (every request asks NSS).
    func testALineGlibcMightReadDifferentlyMakesTheFileUnusable() {
        let good = "root:x:0:0:root:/root:/bin/bash\n"
        for bad in ["#comment:x:1:1:::", " alice:x:1:1:::", "+alice:x:1:1:::", "-alice::::::", "+", "alice:x:1:1::",
                    "alice:x:1:1::::", "alice:x::1:::", "alice:x:-1:1:::", "alice:x:4294967296:1:::", "alice:x:1x:1:::",
                    ":x:1:1:::", "al ice:x:1:1:::", "al\u{7F}ice:x:1:1:::", "alice:x:1:1:::\0"] {
            XCTAssertNil(parse(good + bad + "\n"), bad)
        }
        XCTAssertNil(PasswdFile(parsing: [UInt8](repeating: 0x0A, count: PasswdFile.maxSize + 1)))
    }

    func testFilesMustBeThePasswdDatabasesFirstSource() {
        func first(_ text: String) -> Bool { PasswdFile.filesFirst(nsswitch: Array(text.utf8)) }
        XCTAssertTrue(first("passwd:         files systemd\ngroup: files systemd\n"), "Debian 12's default")
        XCTAssertTrue(first("# comment\npasswd: files\n"))
        XCTAssertTrue(first("passwd:files [NOTFOUND=return] ldap\n"))
        XCTAssertTrue(first("\tpasswd:\tfiles # local first\n"))
        XCTAssertFalse(first("passwd: sss files\n"), "another source first: its answer could differ")
        XCTAssertFalse(first("passwd: compat\n"))
        XCTAssertFalse(first("group: files\n"), "no passwd line: not assumed")
        XCTAssertFalse(first("passwd:\n"))
        XCTAssertFalse(first("# passwd: files\npasswd: ldap files\n"))
        XCTAssertFalse(first("passwd: ldap files\npasswd: files\n"), "the first passwd line counts")
        XCTAssertFalse(first("passwdx: files\n"))
    }
}
