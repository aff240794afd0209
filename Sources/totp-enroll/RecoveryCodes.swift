import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll recovery-codes`: a new set of single-use codes, shown once; only their salted
/// PBKDF2 hashes are stored. Replaces the previous set only once the new codes were written
/// out; the TOTP secrets are not touched.
struct RecoveryCodes: Command {
    static let name = "recovery-codes"
    static let abstract = "Make 10 new single-use recovery codes (replacing any old ones) and show them once."
    static let specs = TargetOptions.specs

    let target: TargetOptions

    init(_ arguments: Arguments) { target = TargetOptions(arguments) }

    func run() throws(CommandError) {
        let context = try target.context()
        let store = try context.openStore()
        let status = try storeCall { () throws(MFAError) in try store.status(user: context.user) }
        guard let record = status?.record, !record.factors.isEmpty else {
            throw CLIError("\(context.userName) has no factor yet: enrol one first (totp-enroll), then make recovery codes")
        }
        try Proof.require(context, store: store, code: nil)
        try issueRecoveryCodes(store: store, context: context, replacing: record.recovery != nil)
    }
}

/// Makes 10 new recovery codes, prints them once and only then stores their hashes (replacing
/// any previous set). The caller has proved who it is.
func issueRecoveryCodes(store: EnrolStore, context: CallerContext, replacing: Bool) throws(CommandError) {
    var rng = SystemRandomNumberGenerator()
    var (codes, set) = RecoverySet.generate(count: 10, using: &rng)
    defer { for i in codes.indices { wipe(&codes[i]) } }
    var text = "Recovery codes for \(context.userName) — each works once at the \"Verification code:\" prompt.\n"
    text += "Store them somewhere safe now: they are not shown again\(replacing ? "; the previous codes no longer work" : "").\n\n"
    for code in codes {
        let s = String(decoding: code, as: UTF8.self)
        text += "    \(s.prefix(4))-\(s.dropFirst(4).prefix(4))-\(s.dropFirst(8))\n"
    }
    // Only codes that reached the output replace the old ones (a full disk, a closed pipe).
    fflush(nil)
    if let e = writeOut(text) {
        throw CLIError("could not write the new codes (\(Errno(e).text.string)): nothing was changed, the previous codes still work")
    }
    do throws(MFAError) {
        _ = try store.replaceRecovery(user: context.user, accountUID: context.uid, set: set)
    } catch {
        if DaemonStore.isUnconfirmed(error) {
            // Which set is in place is not known: only a new one the user holds is certain.
            throw CLIError("\(CLIError.text(error)) (the codes above, or the previous ones): run totp-enroll recovery-codes again")
        }
        throw CLIError("\(CLIError.text(error)): the codes above were NOT saved and do not work; the previous codes still work")
    }
    Audit.log("made \(set.hashes.count) new recovery codes", context: context)
}

/// Writes `text` to standard output unbuffered; the errno of a failed write, or nil.
func writeOut(_ text: String) -> Int32? {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
    let n = bytes[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
    if n < 0 && clibc_errno() == EINTR { continue }
    if n <= 0 { return n < 0 ? clibc_errno() : EIO }
    offset += n
    }
    return nil
}
