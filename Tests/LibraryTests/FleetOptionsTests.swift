import XCTest
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

/// Fleet mode's settings (docs/ARCHITECTURE.md, section 8): `backend` and `postgresql`, strict like the rest.
final class FleetOptionsTests: XCTestCase {
    func config(_ text: String) throws -> ModuleOptions {
        var o = ModuleOptions()
        try o.applyConfig(Array(text.utf8), file: "test.conf")
        return o
    }

    func testBackendAndConninfoFromTheFile() throws {
        XCTAssertEqual(ModuleOptions().backend, .files)
        XCTAssertNil(ModuleOptions().postgresql)
        let o = try config("backend = postgresql\npostgresql = host=db.example port=5432 sslmode=verify-full dbname=pam_totp\n")
        XCTAssertEqual(o.backend, .postgresql)
        XCTAssertEqual(o.postgresql.map { String(decoding: $0, as: UTF8.self) }, "host=db.example port=5432 sslmode=verify-full dbname=pam_totp")
        XCTAssertEqual(try config("backend = files").backend, .files)
        XCTAssertEqual(try ModuleOptions.parse([Array("backend=postgresql".utf8)]).backend, .postgresql)
    }

    func testBadValuesAreRefusedAndTheConninfoIsNeverEchoed() throws {
        for bad in ["backend = mysql", "backend", "backend = ", "postgresql = ", "postgresql",
                    "postgresql = host=x\u{7}", "postgresql = " + String(repeating: "a", count: 4097)] {
            XCTAssertThrowsError(try config(bad), bad)
        }
        // A CONNINFO is only read from the file: pam.d arguments are world-readable.
        XCTAssertThrowsError(try ModuleOptions.parse([Array("postgresql=password=hunter2".utf8)])) { error in
            guard case .invalidOption(let m) = error as? MFAError else { return XCTFail("\(error)") }
            XCTAssertFalse(m.string.contains("hunter2"), m.string)
        }
        XCTAssertThrowsError(try config("postgresql = password=hunter2\u{1}")) { error in
            guard case .invalidOption(let m) = error as? MFAError else { return XCTFail("\(error)") }
            XCTAssertFalse(m.string.contains("hunter2"), m.string)
            XCTAssertTrue(m.string.contains("test.conf:1"), m.string)
        }
    }

    /// db_connect_timeout and db_idle_timeout (issue 38): seconds, from the file only, never in a section.
    func testConnectionTimeouts() throws {
        XCTAssertEqual(ModuleOptions().dbConnectTimeout, 5)
        XCTAssertEqual(ModuleOptions().dbIdleTimeout, 60)
        let o = try config("db_connect_timeout = 12\ndb_idle_timeout = 600\n")
        XCTAssertEqual(o.dbConnectTimeout, 12)
        XCTAssertEqual(o.dbIdleTimeout, 600)
        XCTAssertEqual(try config("db_connect_timeout = 120\ndb_idle_timeout = 86400").dbIdleTimeout, 86_400)
        for bad in ["db_connect_timeout = 0", "db_connect_timeout = 121", "db_connect_timeout", "db_connect_timeout = 5s",
                    "db_idle_timeout = 0", "db_idle_timeout = 86401", "db_idle_timeout = -1",
                    "[group wheel]\ndb_idle_timeout = 10", "[service sshd]\ndb_connect_timeout = 10"] {
            XCTAssertThrowsError(try config(bad), bad)
        }
        XCTAssertThrowsError(try ModuleOptions.parse([Array("db_idle_timeout=10".utf8)]), "not on a pam.d line")
    }

    /// host_credential (issue 38): an absolute path, from the file only, never in a section.
    func testHostCredentialIsAFileOnlyPath() throws {
        XCTAssertNil(ModuleOptions().hostCredential)
        XCTAssertEqual(try config("host_credential = /etc/security/pam_totp.host").hostCredential.map { String(decoding: $0, as: UTF8.self) },
                       "/etc/security/pam_totp.host")
        for bad in ["host_credential = relative/path", "host_credential", "host_credential = ", "host_credential = /x\u{7}",
                    "host_credential = /" + String(repeating: "a", count: 1024), "[group wheel]\nhost_credential = /x",
                    "[service sshd]\nhost_credential = /x"] {
            XCTAssertThrowsError(try config(bad), bad)
        }
        XCTAssertThrowsError(try ModuleOptions.parse([Array("host_credential=/x".utf8)]), "not on a pam.d line")
    }
}
