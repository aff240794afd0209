import Foundation
import XCTest
import TestSupport
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

/// Review findings on the account look-up (second review, after the store rewrite).
final class AccountLookupTests: XCTestCase {
    let secret = Array("12345678901234567890".utf8)
    var dir: URL!

    override func setUpWithError() throws {
        dir = try makeTemporaryDirectory("acct")
        XCTAssertEqual(chmod(dir.path, 0o700), 0)
        let store = try Store(path: Array(dir.path.utf8))
        try store.write(user: Array("alice".utf8), record: UserRecord(uid: 1000, id: 9, factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret),
        ]))
    }

    override func tearDown() { removeTemporaryDirectory(dir) }

    func lookup(_ name: String, _ account: () throws(MFAError) -> Account?) -> String {
        do throws(MFAError) {
            switch try Store(path: Array(dir.path.utf8)).lookup(user: Array(name.utf8), account: account) {
            case .enrolled: return "enrolled"
            case .unenrolled: return "unenrolled"
            case .otherAccount: return "otherAccount"
            case .failed: return "failed"
            }
        } catch {
            return "failed"
        }
    }

    /// "ALICE" that a case-insensitive directory resolves to the account "alice" is alice: it
    /// used to be "unenrolled", which nullok let through without a code.
    func testAnotherSpellingOfAnEnrolledAccountIsEnrolled() {
        XCTAssertEqual(lookup("ALICE") { () throws(MFAError) -> Account? in Account(name: Array("alice".utf8), uid: 1000) },
                       "enrolled")
        XCTAssertEqual(lookup("alice") { () throws(MFAError) -> Account? in Account(name: Array("alice".utf8), uid: 1000) },
                       "enrolled")
        // ...but only for the account the record was enrolled for.
        XCTAssertEqual(lookup("ALICE") { () throws(MFAError) -> Account? in Account(name: Array("alice".utf8), uid: 1001) },
                       "otherAccount")
        XCTAssertEqual(lookup("bob") { () throws(MFAError) -> Account? in Account(name: Array("bob".utf8), uid: 1002) },
                       "unenrolled")
    }

    /// A spelling that cannot be a record name ("alice " with a trailing space, which an LDAP
    /// directory's caseIgnoreMatch resolves to alice) used to be "unenrolled" before NSS was
    /// asked, and nullok let it through without a code. The account NSS names decides.
    func testASpellingThatCannotBeARecordNameIsStillTheAccountNSSResolves() {
        var options = ModuleOptions()
        options.store = Array(dir.path.utf8)
        func viaAuthenticator(_ name: String, _ account: () throws(MFAError) -> Account?) -> String {
            switch Authenticator.lookup(user: Array(name.utf8), options: options, account: account).enrollment {
            case .enrolled: return "enrolled"
            case .unenrolled: return "unenrolled"
            case .otherAccount: return "otherAccount"
            case .failed: return "failed"
            }
        }
        let alice = { () throws(MFAError) -> Account? in Account(name: Array("alice".utf8), uid: 1000) }
        XCTAssertEqual(viaAuthenticator("alice ", alice), "enrolled")
        XCTAssertEqual(viaAuthenticator("ALICE\u{e9}", alice), "enrolled")
        XCTAssertEqual(viaAuthenticator("alice ") { () throws(MFAError) -> Account? in Account(name: Array("alice".utf8), uid: 1001) },
                       "otherAccount")
        XCTAssertEqual(viaAuthenticator("nobody here") { () throws(MFAError) -> Account? in nil }, "unenrolled")
        XCTAssertEqual(viaAuthenticator("alice ") { () throws(MFAError) -> Account? in throw .system(operation: "getpwnam_r", errno: .ioError) },
                       "failed")
    }

    /// An NSS failure is an error (it denies), never "no such account" (which reads as
    /// unenrolled, and nullok lets through).
    func testAFailedAccountLookUpDenies() {
        let failing = { () throws(MFAError) -> Account? in throw .system(operation: "getpwnam_r", errno: .ioError) }
        XCTAssertEqual(lookup("alice", failing), "failed", "enrolled name, record bound to a uid")
        XCTAssertEqual(lookup("ALICE", failing), "failed", "a spelling with no record of its own")
        XCTAssertEqual(lookup("nobody-here", failing), "failed")
    }
}
