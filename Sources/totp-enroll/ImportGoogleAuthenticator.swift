import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll import-google-authenticator`: moves a user from pam_google_authenticator to
/// pam_totp without a new QR code. The secret becomes a factor, the scratch codes become
/// recovery codes, and the file's settings are mapped to pam_totp's module options (printed as
/// suggestions: those options apply to every user). The file itself is left alone.
struct ImportGoogleAuthenticator: Command {
    static let name = "import-google-authenticator"
    static let abstract = "Import a ~/.google_authenticator file (TOTP mode) as a factor and recovery codes."
    static let discussion = """
            Reads FILE (default: the user's ~/.google_authenticator), which must be a regular \
            file owned by the user and not writable by group or other, and adds its secret as a \
            factor (SHA-1, 6 digits, its STEP_SIZE) and its scratch codes as recovery codes \
            (replacing existing ones). Prints how each setting maps to pam_totp. HOTP-mode files \
            are refused. Never prints the secret or the codes; does not change or delete FILE.
            """

    static let defaultLabel = "google-authenticator"

    static let specs: [ArgumentSpec] = [.argument("FILE", "The file to import (default: the user's ~/.google_authenticator).", required: false)]
        + TargetOptions.specs + [.option("--name", "LABEL", "A name for the new factor (default: google-authenticator).")]

    let file: String?
    let target: TargetOptions
    let name: String?

    init(_ arguments: Arguments) throws(CommandError) {
        file = arguments.argument("FILE")
        target = TargetOptions(arguments)
        name = try newFactorName(arguments)
    }

    func run() throws(CommandError) {
        let context = try target.context()
        let (path, owner) = try fileAndOwner(context)
        let label = name ?? Self.defaultLabel

        // Everything about the file is checked before the store is touched: a refused file
        // leaves no record, no state and no lock file.
        var bytes = try readGoogleAuthenticatorFile(path, owner: owner)
        defer { wipe(&bytes) }
        var parsed: GoogleAuthenticatorFile
        do { parsed = try GoogleAuthenticatorFile(parsing: bytes) } catch { throw CLIError(displayPath(path) + ": " + CLIError.text(error)) }
        defer { parsed.erase() }
        let period = parsed.stepSize ?? GoogleAuthenticatorFile.defaultStepSize
        let parameters: OTPParameters
        do { parameters = try OTPParameters(algorithm: .sha1, digits: 6, period: period) } catch { throw CLIError(error) }

        // Checked before the password and a code are spent: the label and the secret (an
        // import of a secret this user already has would make every code work twice).
        let store = try context.openStore()
        try checkEnrollable(store, context, label: label, secret: parsed.secret)
        // Like every subcommand that changes the store: a caller who is not root proves who
        // they are first (a no-op for root).
        try Proof.require(context, store: store, code: nil)
        let existing = try storeCall { () throws(MFAError) in try store.status(user: context.user) }?.record

        let now = Int64(time(nil))
        let usedStep = try Self.lastUsedStep(parsed, at: now, period: period)

        let existingCodes = existing?.recovery?.hashes.count ?? 0
        if !parsed.scratchCodes.isEmpty && existingCodes > 0 {
            print("\(context.userName)'s \(existingCodes) existing recovery codes are replaced by the \(parsed.scratchCodes.count) imported scratch codes: the old ones stop working.")
        }
        // The factor and the recovery codes land in one locked, atomic write.
        let leftOut = try storeCall { () throws(MFAError) -> Int in
            let factor = try Factor(label: Array(label.utf8), parameters: parameters, created: now, enrolledStep: usedStep,
                                    secret: parsed.secret)
            return try store.enroll(user: context.user, accountUID: context.uid, factor: factor,
                                    importedCodes: parsed.scratchCodes.isEmpty ? nil : parsed.scratchCodes)
        }
        if leftOut > 0 {
            print("\(leftOut) of the file's scratch codes were already used as recovery codes here: they stay used and were not imported.")
        }
        Audit.log("imported \(Audit.safe(displayPath(path))) as factor \"\(Audit.safe(label))\" with \(parsed.scratchCodes.count - leftOut) recovery codes", context: context)
        print(report(parsed, path: displayPath(path), user: context.userName, label: label, period: period,
                     keptRecovery: parsed.scratchCodes.isEmpty ? existingCodes : nil))
    }

    /// The file to import (the user's ~/.google_authenticator unless named) and who must own it.
    fileprivate func fileAndOwner(_ context: CallerContext) throws(CommandError) -> (path: String, owner: GAFileOwner) {
        guard let pw = getpwnam(context.userName) else { throw CLIError("no such user: \(context.userName)") }
        let owner = GAFileOwner(name: context.userName, uid: pw.pointee.pw_uid, gid: pw.pointee.pw_gid)
        if let file { return (file, owner) }
        guard let dir = pw.pointee.pw_dir, dir.pointee == 0x2F else {
            throw CLIError("\(owner.name) has no home directory; name the file to import")
        }
        return (String(cString: dir) + "/.google_authenticator", owner)
    }

    /// The replay guard: every step up to now counts as used. That blocks the code the app
    /// shows right now too, which is the price of also blocking any code already typed at a
    /// google-authenticator prompt (or seen by someone else) within the window.
    static func lastUsedStep(_ parsed: GoogleAuthenticatorFile, at now: Int64, period: UInt64) throws(CommandError) -> UInt64 {
        var usedStep: UInt64
        do { usedStep = try TOTP.step(at: now, period: period) } catch { throw CLIError(error) }
        for step in parsed.usedSteps where step > usedStep && step <= usedStep + UInt64(TOTPVerifier.maxAdjacentIntervals) {
            usedStep = step  // a code already used a little ahead of our clock (phone ahead)
        }
        return usedStep
    }

    /// What was imported and how each setting maps to pam_totp; never a secret or a code.
    fileprivate func report(_ f: GoogleAuthenticatorFile, path: String, user: String, label: String, period: UInt64,
                keptRecovery: Int?) -> String {
        var lines: [String] = []
        lines.append("Imported \(path) for \(user) as factor \"\(shown(label))\": TOTP, SHA-1, 6 digits, \(period)-second steps.")
        lines.append("Its settings, and what they become in pam_totp:")
        func row(_ setting: String, _ effect: String) {
            let pad = setting.count < 22 ? String(repeating: " ", count: 22 - setting.count) : " "
            lines.append("  " + setting + pad + "-> " + effect)
        }
        row("TOTP_AUTH", "TOTP, the only mode pam_totp supports")
        row(f.stepSize.map { "STEP_SIZE \($0)" } ?? "STEP_SIZE (not set)", "the factor's period: \(period) seconds")

        let window = f.windowSize ?? GoogleAuthenticatorFile.defaultWindowSize
        let adjacent = min(max((window - 1) / 2, 0), TOTPVerifier.maxAdjacentIntervals)
        var windowNote = f.windowSize == nil ? " (google-authenticator's default window of 3)" : ""
        if window % 2 == 0 { windowNote += " (google-authenticator also accepted one more step ahead)" }
        if (window - 1) / 2 > TOTPVerifier.maxAdjacentIntervals { windowNote += " (clamped: pam_totp's maximum is 10)" }
        row(f.windowSize.map { "WINDOW_SIZE \($0)" } ?? "WINDOW_SIZE (not set)",
            "adjacent_intervals=\(adjacent)\(windowNote); pam_totp's default is \(TOTPVerifier.defaultAdjacentIntervals)")

        if f.disallowReuse {
            row("DISALLOW_REUSE", "always on in pam_totp: every code works once")
        } else {
            row("DISALLOW_REUSE (not set)", "always on in pam_totp: every code works once (google-authenticator let this user reuse codes)")
        }
        if let (attempts, interval) = f.rateLimit {
            row("RATE_LIMIT \(attempts) \(interval)",
                "suggestion: max_failures=\(attempts) lockout=\(interval) (pam_totp counts consecutive failures, in the store, across sessions; google-authenticator counted every login attempt in a \(interval)-second window)")
        } else {
            row("RATE_LIMIT (not set)", "pam_totp always limits failures: max_failures (default 10), lockout (default 300 seconds)")
        }
        if let skew = f.timeSkew, skew != 0 {
            let needed = Int(skew.magnitude) + adjacent
            row("TIME_SKEW \(skew)",
                "not carried over: pam_totp learns no per-user clock skew; this phone was \(skew) steps off: fix its clock"
                + (needed <= TOTPVerifier.maxAdjacentIntervals ? ", or set adjacent_intervals=\(needed)" : " (more than adjacent_intervals can cover)"))
        }
        if f.resettingTimeSkew {
            row("RESETTING_TIME_SKEW", "dropped: google-authenticator's skew-learning state; pam_totp has none")
        }
        let n = f.scratchCodes.count
        if n > 0 {
            row("\(n) scratch code\(n == 1 ? "" : "s")", "\(n) recovery code\(n == 1 ? "" : "s") (each works once)")
        } else {
            row("no scratch codes", keptRecovery.map { $0 > 0 ? "no recovery codes imported; \(user)'s \($0) existing recovery codes are kept" : "no recovery codes (make some with totp-enroll recovery-codes)" } ?? "no recovery codes")
        }
        lines.append("The module options above apply to every user: set them on the pam_totp.so line or in /etc/security/pam_totp.conf.")
        lines.append("Replay guard: time steps up to now count as used, so no code already used with google-authenticator can log in again. This also blocks the code the app shows right now: log in with the next one, at most \(period) seconds away.")
        lines.append("\(path) was not changed or deleted. After a login through pam_totp works, remove the pam_google_authenticator.so line from the PAM stacks and delete \(path).")
        return lines.joined(separator: "\n")
    }
}

// MARK: - Reading the file

/// Whose file it must be.
private struct GAFileOwner {
    let name: String
    let uid: uid_t
    let gid: gid_t
}

/// The file is the user's: it is opened with the user's identity (the tool may run as root,
/// or set-uid root), O_NOFOLLOW (a symlink is refused), O_NONBLOCK (a FIFO cannot hang us),
/// then checked with fstat (regular, owned by the user, not writable by group or other) and
/// read with a bound. The bytes hold the secret: the caller wipes them.
private func readGoogleAuthenticatorFile(_ path: String, owner: GAFileOwner) throws(CommandError) -> [UInt8] {
    let shown = displayPath(path)
    let fd = try withFileIdentity(of: owner) { () -> Int32 in
        clibc_open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0)
    }
    if fd < 0 {
        let e = clibc_errno()
        switch e {
        case ELOOP: throw CLIError("\(shown) is a symlink; refusing it (name the real file)")
        case ENOENT: throw CLIError("\(shown) does not exist")
        case EACCES: throw CLIError("cannot open \(shown) as \(owner.name): permission denied")
        default: throw CLIError("cannot open \(shown): \(Errno(e).text.string)")
        }
    }
    defer { close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0 else { throw CLIError("cannot stat \(shown): \(Errno.current.text.string)") }
    guard st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG) else { throw CLIError("\(shown) is not a regular file") }
    guard st.st_uid == owner.uid else {
        throw CLIError("\(shown) is owned by uid \(st.st_uid), not by \(owner.name) (uid \(owner.uid)); refusing it")
    }
    guard st.st_mode & 0o022 == 0 else {
        throw CLIError("\(shown) is writable by group or other; refusing it (chmod 600 it, and check that nobody changed it)")
    }
    if st.st_mode & 0o044 != 0 {
        warn("note: \(shown) is readable by group or other: others may have copied the secret; consider enrolling a new one with totp-enroll instead")
    }
    let limit = GoogleAuthenticatorFile.maxSize
    guard st.st_size <= limit else { throw CLIError("\(shown) is larger than \(limit / 1024) KiB; not a google-authenticator file") }
    var buffer = [UInt8](repeating: 0, count: limit + 1)
    var total = 0
    while total < buffer.count {
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + total, $0.count - total) }
        if n < 0 {
            if clibc_errno() == EINTR { continue }
            let e = clibc_errno()
            wipe(&buffer)
            throw CLIError("cannot read \(shown): \(Errno(e).text.string)")
        }
        if n == 0 { break }
        total += n
    }
    if total > limit { wipe(&buffer); throw CLIError("\(shown) is larger than \(limit / 1024) KiB; not a google-authenticator file") }
    buffer.removeLast(buffer.count - total)  // in place: no copy of the secret left behind
    return buffer
}

/// Runs `body` with the effective uid, gid and groups of `owner` when we are root and the
/// owner is not, so that opening a caller-supplied path can do nothing the owner could not do
/// (no root-only file, device or directory is reachable through it; NFS homes work). The
/// identity is verified after the switch and restored afterwards.
private func withFileIdentity<R>(of owner: GAFileOwner, _ body: () throws(CommandError) -> R) throws(CommandError) -> R {
    guard geteuid() == 0, owner.uid != 0 else { return try body() }
    let savedGID = getegid()
    let count = getgroups(0, nil)
    guard count >= 0 else { throw CLIError("getgroups failed: \(Errno.current.text.string)") }
    var groups = [gid_t](repeating: 0, count: Int(count))
    guard getgroups(count, &groups) == count else { throw CLIError("getgroups failed: \(Errno.current.text.string)") }
    func restore() throws(CommandError) {
        guard seteuid(0) == 0, setegid(savedGID) == 0, setgroups(groups.count, groups) == 0,
              geteuid() == 0, getegid() == savedGID else {
            throw CLIError("cannot return to root after reading the file: \(Errno.current.text.string)")
        }
    }
    var one = [owner.gid]
    guard setgroups(1, &one) == 0 else { throw CLIError("setgroups failed: \(Errno.current.text.string)") }
    guard setegid(owner.gid) == 0, seteuid(owner.uid) == 0, geteuid() == owner.uid, getegid() == owner.gid else {
        let e = clibc_errno()
        try restore()
        throw CLIError("cannot take the identity of \(owner.name) to read the file: \(Errno(e).text.string)")
    }
    let result: Result<R, CommandError>
    do { result = .success(try body()) } catch { result = .failure(error) }
    let e = clibc_errno()  // body's errno survives the restore
    try restore()
    clibc_set_errno(e)
    return try result.get()
}

/// The path as it may be printed: control characters become '?'.
private func displayPath(_ path: String) -> String { shown(path) }
