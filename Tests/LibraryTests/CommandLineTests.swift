import MFACommandLine
import XCTest

/// totp-enroll's and pam-totpd's command-line parser (MFACommandLine): what each form of an
/// argument means, and the mistakes it refuses with a message naming them.
final class CommandLineTests: XCTestCase {
    let specs: [ArgumentSpec] = [
        .argument("FILE", "a file", required: false),
        .option("--user", "NAME", "a user"),
        .repeated("--assign", "SERIAL=USER", "repeatable"),
        .flag("--json", "a flag"),
        .option("--digits", "N", "a number"),
    ]

    func testEveryFormOfAnArgument() throws {
        let a = try Arguments(["--user", "alice", "--assign=1=bob", "f.xml", "--assign", "2=carol", "--json", "--digits=8"], specs: specs)
        XCTAssertEqual(a.string("--user"), "alice")
        XCTAssertEqual(a.strings("--assign"), ["1=bob", "2=carol"])
        XCTAssertTrue(a.flag("--json"))
        XCTAssertEqual(a.argument("FILE"), "f.xml")
        XCTAssertEqual(try a.integer("--digits", Int.self), 8)
        // The last of a single option counts; "-" is a value (standard input), also as a positional.
        let b = try Arguments(["--user", "a", "--user", "-", "-"], specs: specs)
        XCTAssertEqual(b.string("--user"), "-")
        XCTAssertEqual(b.argument("FILE"), "-")
        XCTAssertFalse(b.flag("--json"))
        XCTAssertNil(b.string("--digits"))
        // After "--" everything is positional.
        XCTAssertEqual(try Arguments(["--", "--json"], specs: specs).argument("FILE"), "--json")
        XCTAssertFalse(try Arguments(["--", "--json"], specs: specs).flag("--json"))
    }

    /// `-h` asks for help only where an option may stand: as an option's value it is a value
    /// (`totp-enroll remove --code -h LABEL` printed help and exited 0 without removing anything).
    func testHelpIsAskedOnlyWhereAnOptionMayStand() {
        XCTAssertTrue(Arguments.asksForHelp(["--help"], specs: specs))
        XCTAssertTrue(Arguments.asksForHelp(["f.xml", "--json", "-h"], specs: specs))
        XCTAssertFalse(Arguments.asksForHelp(["--user", "-h", "f.xml"], specs: specs))
        XCTAssertFalse(Arguments.asksForHelp(["--user", "--help"], specs: specs))
        XCTAssertFalse(Arguments.asksForHelp(["--", "--help"], specs: specs))
        XCTAssertTrue(Arguments.asksForHelp(["--user=x", "--help"], specs: specs))
    }

    func testMistakesAreRefusedByName() {
        func refused(_ arguments: [String], _ specs: [ArgumentSpec]? = nil) -> String {
            do { _ = try Arguments(arguments, specs: specs ?? self.specs); return "accepted" } catch { return error.description }
        }
        XCTAssertEqual(refused(["--bogus"]), "Unknown option '--bogus'")
        XCTAssertEqual(refused(["--user"]), "Missing value for '--user <NAME>'")
        XCTAssertEqual(refused(["--user", "--json"]), "Missing value for '--user <NAME>'")
        XCTAssertEqual(refused(["--json=yes"]), "'--json' takes no value")
        XCTAssertEqual(refused(["a", "b"]), "Unexpected argument 'b'")
        XCTAssertEqual(refused([], [.argument("label", "the label")]), "Missing expected argument '<label>'")
        XCTAssertEqual(refused([], [.option("--admin", "CONNINFO", "x", required: true)]), "Missing expected argument '--admin <CONNINFO>'")
        XCTAssertThrowsError(try Arguments(["--digits", "6x"], specs: specs).integer("--digits", Int.self))
        XCTAssertThrowsError(try Arguments(["--digits", "99999999999999999999"], specs: specs).integer("--digits", Int.self))
        XCTAssertThrowsError(try Arguments(["--user", "x"], specs: specs).choice("--user", ["a", "b"]))
    }
}
