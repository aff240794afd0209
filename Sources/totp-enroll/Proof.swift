import MFACommandLine
import CLibc
import MFAImport
import MFAPamStacks
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// How a caller who is not root proves who they are before any change: the PAM service
/// `totp-enroll` (the password, through the system's stack), and then — when the user already
/// has a factor — a current code, which this tool checks itself through the store, counted
/// like a login (failures, lockout, replay guard), so a stack without pam_totp cannot let the
/// password alone change a user's factors. A code the stack itself already accepted in this
/// process (pam_totp records the process id with it) is not asked for twice.
enum Proof {
    static let serviceFile = "/etc/pam.d/totp-enroll"

    static func require(_ context: CallerContext, store: EnrolStore, code: String?) throws(CommandError) {
        guard getuid() != 0 else { return }  // root acts without re-authenticating
        try checkServiceFile()
        let before = try storeCall { () throws(MFAError) in try store.status(user: context.user) }
        try Privilege.reauthenticate(user: context.userName, code: code)
        guard let before, before.record.isEnrolled, before.record.belongs(toAccount: context.uid) else { return }
        let me = UInt32(truncatingIfNeeded: getpid())
        if let after = try? store.status(user: context.user),
           after.state.sequence > before.state.sequence, after.state.successProcess == me {
            return  // the stack's pam_totp accepted a code in this process
        }
        guard let answer = code ?? readHidden("Verification code: ") else {
            throw CLIError("no code entered: nothing was changed")
        }
        var bytes = Array(answer.utf8)
        defer { wipe(&bytes) }
        let options = try siteOptions()
        let outcome = try storeCall { () throws(MFAError) in
            try store.verify(user: context.user, uid: context.uid, answer: bytes, at: Int64(time(nil)), options: options, process: me)
        }
        switch outcome {
        case .success, .recoveryCode:
            return
        case .failed(let e):
            throw CLIError("cannot check the code: \(CLIError.text(e)); nothing was changed")
        case .wrongCode, .resyncNeeded, .notRecorded, .lockedOut, .unenrolled:
            // One answer for all of them, like the module (no oracle, no enumeration). A token
            // out of sync is resynced at a login (pam_totp asks for its next code), not here.
            throw CLIError("authentication failed: nothing was changed")
        }
    }

    /// Without its own service file libpam would use `other`, which may accept the password
    /// alone (or nothing): refuse to act for anyone but root.
    static func checkServiceFile() throws(CommandError) {
        var st = stat()
        guard lstat(serviceFile, &st) == 0 else {
            throw CLIError("\(serviceFile) is missing: without it PAM cannot check who you are; reinstall pam_totp (make install) or ask root")
        }
        guard st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG), st.st_uid == 0, st.st_mode & 0o022 == 0 else {
            throw CLIError("\(serviceFile) must be a regular file owned by root and not writable by group or other")
        }
    }
}
