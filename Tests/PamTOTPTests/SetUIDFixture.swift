import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// totp-enroll as an unprivileged user meets it: a throwaway account with a known password, a
/// set-uid root copy of the built binary, /etc/pam.d/totp-enroll (saved and restored), the
/// default store. `cleanup` undoes everything.
final class SetUIDFixture {
    let root: URL
    let binary: String
    let user: String
    let uid: uid_t
    let gid: gid_t
    let password = "c0rrect-h0rse-\(UInt32.random(in: 0...UInt32.max))"
    let storePath = String(decoding: Store.defaultDirectory, as: UTF8.self)
    private let savedService: Data?
    private var createdStore = false

    /// `prefix` names the account (prefix + pid); `service` is the PAM stack to install.
    init(prefix: String, service: String) throws {
        root = try makeTemporaryDirectory("pam_totp_suid")
        XCTAssertEqual(chmod(root.path, 0o755), 0)
        binary = root.appendingPathComponent("totp-enroll").path
        try FileManager.default.copyItem(atPath: enrollURL.path, toPath: binary)
        XCTAssertEqual(chown(binary, 0, 0), 0)
        XCTAssertEqual(chmod(binary, 0o4755), 0)
        user = prefix + "\(getpid() % 100000)"
        XCTAssertEqual(try runCommand(["useradd", "-M", "-s", "/bin/sh", user]).status, 0)
        XCTAssertEqual(try runCommand(["chpasswd"], input: "\(user):\(password)\n").status, 0)
        let pw = try XCTUnwrap(getpwnam(user))
        uid = pw.pointee.pw_uid
        gid = pw.pointee.pw_gid
        savedService = FileManager.default.contents(atPath: "/etc/pam.d/totp-enroll")
        try service.write(toFile: "/etc/pam.d/totp-enroll", atomically: true, encoding: .utf8)
        if !FileManager.default.fileExists(atPath: storePath) {
            XCTAssertEqual(mkdir(storePath, 0o700), 0)
            createdStore = true
        }
    }

    /// The service the suites install: the password, then pam_totp with nullok (an older
    /// shipped stack; totp-enroll must not ask for a code twice with it).
    static var passwordAndModuleService: String {
        """
        auth     required  pam_unix.so
        auth     required  \(moduleURL.path) nullok
        account  required  pam_unix.so

        """
    }

    func cleanup() {
        for name in [user, ".state." + user, ".lock." + user, ".tmp." + user] { unlink(storePath + "/" + name) }
        if createdStore { rmdir(storePath) }
        if let savedService {
            _ = FileManager.default.createFile(atPath: "/etc/pam.d/totp-enroll", contents: savedService)
        } else {
            unlink("/etc/pam.d/totp-enroll")
        }
        _ = try? runCommand(["userdel", user])
        removeTemporaryDirectory(root)
    }
}
