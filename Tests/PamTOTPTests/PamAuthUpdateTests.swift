import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The pam-auth-update profile, enabled for real by Debian's pam-auth-update inside a private
/// mount namespace (copies of /etc/pam.d, /usr/share/pam-configs and /var/lib/pam are bound
/// over the real ones, so the machine's stacks are never touched), then exercised with
/// pamtester through "@include common-auth": password (pam_unix), then code (pam_totp).
final class PamAuthUpdateTests: XCTestCase {
    var root: URL!
    var user = ""
    let password = "Tr0ub4dor-\(UInt32.random(in: 0...UInt32.max))"
    let secretB32 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: useradd, mount namespaces")
        root = try makeTemporaryDirectory("pam_totp_pau")
        user = "totppau\(getpid() % 100000)"
        XCTAssertEqual(try runCommand(["useradd", "-M", "-s", "/usr/sbin/nologin", user]).status, 0)
        XCTAssertEqual(try runCommand(["chpasswd"], input: "\(user):\(password)\n").status, 0)
    }

    override func tearDown() {
        if !user.isEmpty { _ = try? runCommand(["userdel", user]) }
        if let root { removeTemporaryDirectory(root) }
    }

    func testProfileAddsTheModuleAfterThePrimaryBlock() throws {
        let store = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
        try Store(path: Array(store.path.utf8)).write(user: Array(user.utf8), record: UserRecord(factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: try Base32.decode(Array(secretB32.utf8))),
        ]))
        // The shipped profile, pointed at the built module and the test store.
        let profile = try String(contentsOf: packageRoot.appendingPathComponent("pam.d/pam-configs-pam_totp"), encoding: .utf8)
        XCTAssertTrue(profile.contains("\trequired\tpam_totp.so nullok"), profile)
        let testProfile = profile.replacingOccurrences(of: "pam_totp.so nullok",
                                                       with: "\(moduleURL.path) nullok store=\(store.path)")
        let script = """
            set -eu
            \(copyTreeShell)
            R=\(root.path)
            copy_tree /etc/pam.d "$R/pamd"; cp -a /usr/share/pam-configs "$R/configs"; mkdir -p "$R/varlib"
            cp -a /var/lib/pam/. "$R/varlib/" 2>/dev/null || true
            cat > "$R/configs/pam_totp" <<'PROFILE'
            \(testProfile)
            PROFILE
            printf 'auth include common-auth\\n' > "$R/pamd/pamtotp-pau"
            mount --bind "$R/pamd" /etc/pam.d
            mount --bind "$R/configs" /usr/share/pam-configs
            mount --bind "$R/varlib" /var/lib/pam
            DEBIAN_FRONTEND=noninteractive pam-auth-update --enable pam_totp
            grep -v '^#' /etc/pam.d/common-auth | grep -v '^$' > "$R/common-auth.out"
            code=$(oathtool --totp -b \(secretB32))
            wrong=$(( (10#$code + 1) % 1000000 ))
            printf '%s\\n%s\\n' '\(password)' "$code" | pamtester pamtotp-pau \(user) authenticate && echo OK-RIGHT >> "$R/results"
            printf '%s\\n%06d\\n' '\(password)' "$wrong" | pamtester pamtotp-pau \(user) authenticate || echo DENIED-WRONG >> "$R/results"
            printf '%s\\n%s\\n' 'not-the-password' "$code" | pamtester pamtotp-pau \(user) authenticate || echo DENIED-PASSWORD >> "$R/results"
            printf '%s\\n' '\(password)' | pamtester pamtotp-pau nobody authenticate || echo NOBODY-NO-PASSWORD >> "$R/results"
            """
        awayFromStepBoundary(margin: 8)
        let r = try runCommand(["unshare", "--mount", "--propagation", "private", "bash", "-c", script])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        let stack = try String(contentsOf: root.appendingPathComponent("common-auth.out"), encoding: .utf8)
            .split(separator: "\n").map { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ") }
        let unix = try XCTUnwrap(stack.firstIndex { $0.contains("pam_unix.so") }, stack.joined(separator: "\n"))
        let permit = try XCTUnwrap(stack.firstIndex { $0.contains("pam_permit.so") })
        let totp = try XCTUnwrap(stack.firstIndex { $0.contains(moduleURL.path) })
        XCTAssertTrue(unix < permit && permit < totp, "pam_totp runs after the primary block:\n" + stack.joined(separator: "\n"))
        XCTAssertTrue(stack[totp].hasPrefix("auth required "), stack[totp])
        let results = try String(contentsOf: root.appendingPathComponent("results"), encoding: .utf8)
        XCTAssertTrue(results.contains("OK-RIGHT"), "password + code logs in: " + results)
        XCTAssertTrue(results.contains("DENIED-WRONG"), "password + wrong code is denied: " + results)
        XCTAssertTrue(results.contains("DENIED-PASSWORD"), "wrong password + right code is denied: " + results)
        // The real stack was never touched.
        XCTAssertFalse(try String(contentsOfFile: "/etc/pam.d/common-auth", encoding: .utf8).contains(moduleURL.path))
    }
}
