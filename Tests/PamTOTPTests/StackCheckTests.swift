import Foundation
import TestSupport
import XCTest

/// scripts/pam-stacks-naming-module.sh: the one check run before pam_totp.so is removed, by the
/// Debian package's prerm and by `make uninstall` (docs/ARCHITECTURE.md, section 3). Stacks are written
/// into a temporary directory (`--pamdir`), so nothing here reads or changes /etc/pam.d, except
/// the last test, which runs Debian's pam-auth-update on copies bound over /etc/pam.d inside a
/// private mount namespace (like PamAuthUpdateTests).
final class StackCheckTests: XCTestCase {
    var root: URL!
    var pamd: URL!
    let script = packageRoot.appendingPathComponent("scripts/pam-stacks-naming-module.sh").path

    /// common-auth as pam-auth-update writes it, with `extra` in the "Additional" block.
    func commonAuth(managed extra: String = "", after: String = "") -> String {
        """
        # /etc/pam.d/common-auth - authentication settings common to all services
        # here are the per-package modules (the "Primary" block)
        auth\t[success=1 default=ignore]\tpam_unix.so nullok
        # here's the fallback if no module succeeds
        auth\trequisite\t\t\tpam_deny.so
        auth\trequired\t\t\tpam_permit.so
        # and here are more per-package modules (the "Additional" block)
        \(extra)
        # end of pam-auth-update config
        \(after)

        """
    }

    override func setUpWithError() throws {
        root = try makeTemporaryDirectory("pam_totp_stacks")
        pamd = root.appendingPathComponent("pam.d")
        try FileManager.default.createDirectory(at: pamd, withIntermediateDirectories: false)
    }

    override func tearDown() {
        if let root { removeTemporaryDirectory(root) }
    }

    func write(_ name: String, _ text: String) throws {
        try text.write(to: pamd.appendingPathComponent(name), atomically: true, encoding: .utf8)
    }

    func run(_ arguments: [String]) throws -> CommandResult {
        try runCommand(["sh", script, "--pamdir", pamd.path] + arguments)
    }

    func testListsOnlyActiveLinesOutsideTheManagedBlock() throws {
        try write("common-auth", commonAuth(managed: "auth\trequired\tpam_totp.so nullok"))
        try write("sshd", "@include common-auth\n# auth required pam_totp.so (a comment)\nauth required pam_totp.so\n")
        try write("sudo", "auth required /lib/x86_64-linux-gnu/security/pam_totp.so nullok # full path\n")
        try write("login", "auth required pam_totp.so.old\nauth required pam_totp_other.so\n")
        try write("sshd.dpkg-old", "auth required pam_totp.so\n")
        try write("other", "auth required pam_unix.so # pam_totp.so in a comment\n")
        let r = try run([])
        XCTAssertEqual(r.status, 1, r.stdout + r.stderr)
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init).sorted(),
                       ["\(pamd.path)/sshd:3", "\(pamd.path)/sudo:1"], r.stdout)
        let all = try run(["--all"])
        XCTAssertEqual(all.status, 1)
        XCTAssertTrue(all.stdout.contains("\(pamd.path)/common-auth:8"), all.stdout)
    }

    /// A stack loading pam_2fa.so, a symlink to pam_totp.so, really used the module, yet the
    /// check named no stack and the removal went ahead (review). Lines are compared by the file
    /// their module resolves to (device and inode): a symlink, a hard link, an absolute path
    /// to either, and a bracketed control right before it; another module is not the module.
    func testAnotherNameForTheSameFileNamesTheModule() throws {
        let modules = root.appendingPathComponent("security")
        try FileManager.default.createDirectory(at: modules, withIntermediateDirectories: false)
        let so = modules.appendingPathComponent("pam_totp.so").path
        try Data("not really a module, but a file of its own".utf8).write(to: URL(fileURLWithPath: so))
        XCTAssertEqual(symlink("pam_totp.so", modules.appendingPathComponent("pam_2fa.so").path), 0)
        XCTAssertEqual(link(so, modules.appendingPathComponent("pam_hard.so").path), 0)
        try Data("another module".utf8).write(to: modules.appendingPathComponent("pam_other.so"))
        try write("sshd", "auth required pam_2fa.so\n")
        try write("su", "auth [success=ok default=die]pam_hard.so\n")
        try write("sudo", "auth required \(modules.path)/pam_2fa.so nullok\n")
        try write("other", "-auth [default=die  success=ok] pam_hard.so\n")
        try write("login", "auth required pam_other.so\nauth include common-auth\n")
        try write("common-auth", commonAuth())
        let r = try run(["--moduledir", modules.path])
        XCTAssertEqual(r.status, 1, r.stdout + r.stderr)
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init).sorted(),
                       ["other", "sshd", "su", "sudo"].map { "\(pamd.path)/\($0):1" }, r.stdout)
        let refused = try run(["--moduledir", modules.path, "--before-removal"])
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("\(pamd.path)/sshd:1"), refused.stderr)
        // --module names the module itself; a module elsewhere that is another file is not it.
        let elsewhere = root.appendingPathComponent("pam_totp.so").path
        try Data("a different file".utf8).write(to: URL(fileURLWithPath: elsewhere))
        XCTAssertEqual(try run(["--moduledir", modules.path, "--module", elsewhere]).status, 0)
    }

    func testNoStackNamesTheModule() throws {
        try write("common-auth", commonAuth())
        try write("sshd", "@include common-auth\n")
        let r = try run([])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertEqual(r.stdout, "")
        XCTAssertEqual(try run(["--before-removal"]).status, 0)
    }

    func testALineAfterTheManagedBlockIsTheAdmins() throws {
        try write("common-auth", commonAuth(after: "auth optional pam_totp.so"))
        let r = try run([])
        XCTAssertEqual(r.status, 1)
        XCTAssertEqual(r.stdout, "\(pamd.path)/common-auth:10\n")
        // The block markers count only in pam-auth-update's own files.
        try write("common-auth", commonAuth())
        try write("sshd", commonAuth(managed: "auth required pam_totp.so"))
        XCTAssertEqual(try run([]).stdout, "\(pamd.path)/sshd:8\n")
    }

    /// libpam ends a bracketed control at its "]": "[default=die]pam_totp.so" loads the module
    /// with no blank in between (tested with pamtester), so such a line names it too (review:
    /// only a blank or "/" before the name counted, and the removal went ahead).
    func testABracketedControlRightBeforeTheModule() throws {
        try write("sshd", "auth [success=ok default=die]pam_totp.so nullok\n")
        try write("sudo", "auth [default=bad]/lib/security/pam_totp.so\n")
        let r = try run([])
        XCTAssertEqual(r.status, 1, r.stdout + r.stderr)
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init).sorted(), ["\(pamd.path)/sshd:1", "\(pamd.path)/sudo:1"], r.stdout)
        XCTAssertEqual(try run(["--before-removal"]).status, 1)
    }

    /// libpam also reads what an include, substack or @include line names: a file in a
    /// subdirectory of pam.d ("local/totp") or anywhere by absolute path (or with ".."), to any
    /// depth. Such a file names the module as much as a service does (review: only the files
    /// directly in pam.d were read, so removing the package broke sshd here).
    func testFilesReachedThroughIncludesAreRead() throws {
        let outside = root.appendingPathComponent("site")
        try FileManager.default.createDirectory(at: pamd.appendingPathComponent("local"), withIntermediateDirectories: false)
        try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: false)
        try write("local/totp", "auth required pam_totp.so\n")
        try write("sshd", "@include common-auth\nauth substack local/totp\n")
        try write("sudo", "auth  include  \(outside.path)/sudo-2fa\n")
        try write("su", "AUTH Include ../site/su-2fa # relative, outside pam.d\n")
        try write("login", "-auth include \(outside.path)/missing\n")
        try "@include \(outside.path)/deeper\n".write(to: outside.appendingPathComponent("sudo-2fa"), atomically: true, encoding: .utf8)
        try "auth required /lib/security/pam_totp.so\n".write(to: outside.appendingPathComponent("deeper"), atomically: true, encoding: .utf8)
        try "auth\trequired\tpam_totp.so nullok\n".write(to: outside.appendingPathComponent("su-2fa"), atomically: true, encoding: .utf8)
        let site = outside.resolvingSymlinksInPath().path  // included files are named as resolved
        let r = try run([])
        XCTAssertEqual(r.status, 1, r.stdout + r.stderr)
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init).sorted(),
                       ["\(site)/deeper:1", "\(site)/su-2fa:1", "\(pamd.path)/local/totp:1"].sorted(), r.stdout)
        XCTAssertEqual(try run(["--before-removal"]).status, 1)
    }

    /// libpam joins a line ending in a backslash with the next one that is not blank or only a
    /// comment: "auth \\", "# ...", "include FILE" is an include of FILE (tested with pamtester).
    func testAnIncludeContinuedOverLines() throws {
        let outside = root.appendingPathComponent("site")
        try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: false)
        try "auth required pam_totp.so\n".write(to: outside.appendingPathComponent("2fa"), atomically: true, encoding: .utf8)
        try write("sshd", "auth \\\n# the second factor\n\n   include \(outside.path)/2fa\nauth required pam_unix.so\n")
        let r = try run([])
        XCTAssertEqual(r.status, 1, r.stdout + r.stderr)
        XCTAssertEqual(r.stdout, "\(outside.resolvingSymlinksInPath().path)/2fa:1\n")
    }

    /// libpam reads /usr/lib/pam.d for a service without a file in /etc/pam.d, and for an
    /// include /etc/pam.d does not have (pamtester: a service only there authenticates). The
    /// live check reads it too; checked on empty copies bound over both in a private mount
    /// namespace (review: /usr/lib/pam.d was not read).
    func testTheLiveCheckReadsUsrLibPamd() throws {
        try XCTSkipUnless(getuid() == 0, "needs root: mount namespaces")
        try XCTSkipUnless(FileManager.default.fileExists(atPath: "/usr/lib/pam.d"), "no /usr/lib/pam.d to bind over")
        let shell = """
            set -eu
            R=\(root.path)
            mkdir "$R/etc" "$R/vendor"
            echo 'auth required pam_totp.so' > "$R/vendor/screensaver"
            echo 'auth required pam_totp.so' > "$R/vendor/totp-include"
            echo 'auth include totp-include' > "$R/etc/sshd"
            mount --bind "$R/etc" /etc/pam.d
            mount --bind "$R/vendor" /usr/lib/pam.d
            sh \(script) && exit 12
            exit 0
            """
        let r = try runCommand(["unshare", "--mount", "--propagation", "private", "bash", "-c", shell])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init).sorted(),
                       ["/usr/lib/pam.d/screensaver:1", "/usr/lib/pam.d/totp-include:1"], r.stdout)
    }

    func testBeforeRemovalRefusesWithOneLineNamingEveryFile() throws {
        try write("sshd", "auth required pam_totp.so\n")
        try write("sudo", "auth required pam_unix.so\nauth required pam_totp.so nullok\n")
        let r = try run(["--before-removal"])
        XCTAssertEqual(r.status, 1)
        XCTAssertEqual(r.stdout, "")
        let lines = r.stderr.split(separator: "\n")
        XCTAssertEqual(lines.count, 1, r.stderr)
        XCTAssertTrue(r.stderr.hasPrefix("pam_totp: not removing pam_totp.so: \(pamd.path)/sshd:1 \(pamd.path)/sudo:2 still name it"), r.stderr)
    }

    func testBeforeRemovalOutsideEtcPamdTreatsTheManagedLineAsStillThere() throws {
        // Only /etc/pam.d is pam-auth-update's; elsewhere (make uninstall DESTDIR=...) nothing
        // unregisters the profile, so its line still names the module and the removal is refused.
        try write("common-auth", commonAuth(managed: "auth\trequired\tpam_totp.so nullok"))
        let r = try run(["--before-removal"])
        XCTAssertEqual(r.status, 1)
        XCTAssertTrue(r.stderr.contains("after pam-auth-update --remove pam_totp"), r.stderr)
    }

    func testUsageErrors() throws {
        XCTAssertEqual(try runCommand(["sh", script, "--bogus"]).status, 2)
        XCTAssertEqual(try runCommand(["sh", script, "--pamdir", root.appendingPathComponent("missing").path]).status, 2)
        let help = try runCommand(["sh", script, "--help"])
        XCTAssertEqual(help.status, 0)
        XCTAssertTrue(help.stdout.contains("--before-removal"), help.stdout)
    }

    /// prerm and make uninstall both call the script: the one implementation cannot drift.
    func testPrermAndUninstallCallTheScript() throws {
        let prerm = try String(contentsOf: packageRoot.appendingPathComponent("debian/prerm"), encoding: .utf8)
        XCTAssertTrue(prerm.contains("/usr/libexec/pam-totp/pam-stacks-naming-module --before-removal"), prerm)
        XCTAssertTrue(prerm.contains("    remove)\n"), "the check runs on remove only, not on upgrade: " + prerm)
        let makefile = try String(contentsOf: packageRoot.appendingPathComponent("Makefile"), encoding: .utf8)
        XCTAssertTrue(makefile.contains("scripts/pam-stacks-naming-module.sh --pamdir $(DESTDIR)$(PAMCONFDIR) --before-removal"), "make uninstall runs the check")
        XCTAssertTrue(makefile.contains("install -D -m 0755 scripts/pam-stacks-naming-module.sh $(DESTDIR)$(LIBEXECDIR)/pam-totp/pam-stacks-naming-module"))
    }

    /// `make uninstall` into a staging tree: the check compares files, so it must be told the
    /// module the Makefile installed and the module directories under DESTDIR. It was not, and
    /// took the live system's: with no pam_totp.so there, a staged sshd loading pam_2fa.so ->
    /// pam_totp.so went unnoticed, and the module was removed from under it (review).
    func testMakeUninstallComparesTheFilesItInstalled() throws {
        let dest = root.appendingPathComponent("dest")
        let modules = dest.appendingPathComponent("lib/security")
        let etcPamd = dest.appendingPathComponent("etc/pam.d")
        try FileManager.default.createDirectory(at: modules, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: etcPamd, withIntermediateDirectories: true)
        let so = modules.appendingPathComponent("pam_totp.so").path
        try Data("not really a module".utf8).write(to: URL(fileURLWithPath: so))
        XCTAssertEqual(symlink("pam_totp.so", modules.appendingPathComponent("pam_2fa.so").path), 0)
        try "auth required pam_2fa.so\n".write(to: etcPamd.appendingPathComponent("sshd"), atomically: true, encoding: .utf8)
        // Only this make's variables: not those of a `make check` that runs the tests.
        var environment = ProcessInfo.processInfo.environment
        for name in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"] { environment[name] = nil }
        func uninstall() throws -> CommandResult {
            try runCommand(["make", "-s", "-C", packageRoot.path, "uninstall", "DESTDIR=\(dest.path)", "PAMDIR=/lib/security"],
                           environment: environment)
        }
        let refused = try uninstall()
        XCTAssertNotEqual(refused.status, 0, refused.stdout + refused.stderr)
        XCTAssertTrue(refused.stderr.contains("\(etcPamd.path)/sshd:1 still name it"), refused.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: so), "the module stays while a stack loads it")
        // Without the line, the removal goes ahead.
        try "auth required pam_unix.so\n".write(to: etcPamd.appendingPathComponent("sshd"), atomically: true, encoding: .utf8)
        let removed = try uninstall()
        XCTAssertEqual(removed.status, 0, removed.stdout + removed.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: so))
    }

    /// The real pam-auth-update, on copies of /etc/pam.d/common-*, /usr/share/pam-configs and /var/lib/pam
    /// bound over the real ones in a private mount namespace: the profile enabled, an sshd line
    /// refuses the removal (and the profile stays enabled), then without it the script
    /// unregisters the profile and common-auth no longer names the module.
    func testBeforeRemovalUnregistersTheProfileWithPamAuthUpdate() throws {
        try XCTSkipUnless(getuid() == 0, "needs root: mount namespaces")
        let profile = packageRoot.appendingPathComponent("pam.d/pam-configs-pam_totp").path
        let shell = """
            set -u
            R=\(root.path)
            mkdir "$R/pamd-real"; cp -a /etc/pam.d/common-* "$R/pamd-real/"; cp -a /usr/share/pam-configs "$R/configs"; mkdir -p "$R/varlib"
            cp -a /var/lib/pam/. "$R/varlib/" 2>/dev/null || true
            cp \(profile) "$R/configs/pam_totp"
            mount --bind "$R/pamd-real" /etc/pam.d
            mount --bind "$R/configs" /usr/share/pam-configs
            mount --bind "$R/varlib" /var/lib/pam
            DEBIAN_FRONTEND=noninteractive pam-auth-update --package --enable pam_totp || exit 10
            grep -q pam_totp.so /etc/pam.d/common-auth || exit 11
            echo 'auth required pam_totp.so' > /etc/pam.d/pamtotp-stackcheck
            sh \(script) --before-removal 2> "$R/refused" && exit 12
            grep -q pam_totp.so /etc/pam.d/common-auth || exit 13
            rm /etc/pam.d/pamtotp-stackcheck
            DEBIAN_FRONTEND=noninteractive sh \(script) --before-removal || exit 14
            grep -q pam_totp /etc/pam.d/common-auth && exit 15
            exit 0
            """
        let r = try runCommand(["unshare", "--mount", "--propagation", "private", "bash", "-c", shell])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        let refused = try String(contentsOf: root.appendingPathComponent("refused"), encoding: .utf8)
        XCTAssertTrue(refused.contains("/etc/pam.d/pamtotp-stackcheck:1 still name it"), refused)
        XCTAssertFalse(try String(contentsOfFile: "/etc/pam.d/common-auth", encoding: .utf8).contains("pam_totp"))
    }
}
