import CLibc
import MFAAdmin
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll policy --user NAME --service NAME`: the policy settings pam_totp applies to that
/// user on that PAM service, and where each came from — the built-in default, the file's global
/// part, a `[group]`/`[service]` section, the pam.d line, or the stricter of the file and the
/// line (ARCHITECTURE rule 16). Root only: it reads another user's groups and every stack.
struct Policy: Command {
    static let name = "policy"
    static let abstract = "Show the policy pam_totp applies to a user on a PAM service, and where each setting came from (root only)."
    static let specs = PolicyLoginOptions.specs + [ConfigFileOption.spec]

    let login: PolicyLoginOptions
    let site: ConfigFileOption

    init(_ arguments: Arguments) throws(CommandError) {
        login = try PolicyLoginOptions(arguments)
        site = ConfigFileOption(arguments)
    }

    func run() throws(CommandError) {
        try Self.requireRoot()
        let (user, service, config) = (login.user, login.service, site.config)
        guard let account = getpwnam(user) else { throw CLIError("no such account: \(shown(user))") }
        let uid = account.pointee.pw_uid, gid = account.pointee.pw_gid
        let line = login.line()
        var all = (line?.arguments ?? []).map { Array($0.utf8) }
        if let config { all.append(Array(("config=" + config).utf8)) }
        let groups = Self.groups(of: user, gid: gid)
        let options: ModuleOptions
        do {
            options = try ModuleOptions.load(all, service: Array(service.utf8)) { (group) throws(MFAError) -> Bool in
                guard let g = getgrnam(String(decoding: group, as: UTF8.self)) else { return false }
                return groups.contains(g.pointee.gr_gid)
            }
        } catch { throw CLIError(error) }
        print("pam_totp's policy for \(shown(user)) (uid \(uid)) on service \(shown(service)):")
        if let line {
            print("  pam_totp line: \(line.at): \(line.arguments.isEmpty ? "(no arguments)" : line.arguments.joined(separator: " "))")
        } else {
            print("  pam_totp line: none in /etc/pam.d/\(service) (or the files it includes): pam_totp does not run there")
        }
        for setting in PolicySetting.all {
            let value: String
            switch setting {
            case .nullok: value = options.nullok ? "yes" : "no"
            case .exempt: value = options.exempt ? "yes" : "no"
            case .adjacentIntervals: value = String(options.adjacentIntervals)
            case .hotpWindow: value = String(options.hotpWindow)
            case .hotpResyncWindow: value = String(options.hotpResyncWindow)
            case .maxFailures: value = String(options.maxFailures)
            case .lockout: value = "\(options.lockoutSeconds) s"
            case .factorKinds: value = String(decoding: ModuleOptions.kindNames(options.factorKinds), as: UTF8.self)
            case .oobDigits: value = String(options.oobDigits)
            case .oobLifetime: value = "\(options.oobLifetime) s"
            case .oobMaxAttempts: value = String(options.oobMaxAttempts)
            case .oobResendInterval: value = "\(options.oobResendInterval) s"
            case .oobMaxPerHour: value = String(options.oobMaxPerHour)
            case .oobMaxPerDay: value = String(options.oobMaxPerDay)
            }
            let from = options.source(of: setting).map { String(decoding: $0, as: UTF8.self) } ?? "the built-in default"
            let name = setting.name.string
            print("  " + name + String(repeating: " ", count: max(1, 20 - name.count)) + value
                  + String(repeating: " ", count: max(1, 8 - value.count)) + from)
        }
    }

    /// The user's primary and supplementary group ids.
    static func groups(of user: String, gid: gid_t) -> [gid_t] {
        var count: Int32 = 64
        var ids = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(user, gid, &ids, &count) < 0 {
            ids = [gid_t](repeating: 0, count: Int(max(count, 1)))
            _ = getgrouplist(user, gid, &ids, &count)
        }
        return Array(ids.prefix(Int(max(0, min(count, Int32(ids.count))))))
    }
}

/// `--user`, `--service` and `--arguments` of `policy`: the login whose policy is shown.
struct PolicyLoginOptions {
    static let specs: [ArgumentSpec] = [
        .option("--user", "NAME", "The user.", required: true),
        .option("--service", "NAME", "The PAM service (a file in /etc/pam.d).", required: true),
        .option("--arguments", "ARGS", "The pam_totp line's arguments to assume (default: those of the first pam_totp line of /etc/pam.d/SERVICE, includes followed)."),
    ]

    let user: String
    let service: String
    let arguments: String?

    init(_ arguments: Arguments) throws(CommandError) {
        user = try arguments.required("--user")
        service = try arguments.required("--service")
        self.arguments = arguments.string("--arguments")
    }

    /// The pam_totp line assumed: --arguments, else the first of the service's stack (nil: none).
    func line() -> (arguments: [String], at: String)? {
        if let arguments { return (arguments.split(separator: " ").map(String.init), "--arguments") }
        return PamStack.firstLine(naming: "pam_totp.so", service: service)
    }
}

/// A PAM stack read as libpam reads it, for `policy`: comments stripped, `@include` and
/// `include`/`substack` lines followed (at most 8 deep), a bracketed control skipped.
enum PamStack {
    static func firstLine(naming module: String, service: String, depth: Int = 0) -> (arguments: [String], at: String)? {
        guard depth < 8, !service.contains("/") || service.hasPrefix("/") else { return nil }
        let path = service.hasPrefix("/") ? service : "/etc/pam.d/" + service
        guard let text = readStackFile(path) else { return nil }
        for (n, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
            var words = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            guard let first = words.first else { continue }
            if first == "@include", words.count > 1 {
                if let found = firstLine(naming: module, service: words[1], depth: depth + 1) { return found }
                continue
            }
            guard ["auth", "-auth"].contains(first.lowercased()), words.count > 2 else { continue }
            words.removeFirst()
            if ["include", "substack"].contains(words[0].lowercased()) {
                if let found = firstLine(naming: module, service: words[1], depth: depth + 1) { return found }
                continue
            }
            // The control: one word, or [...] possibly with blanks, the module right after "]".
            var control = words.removeFirst()
            while control.hasPrefix("["), !control.contains("]"), !words.isEmpty { control += " " + words.removeFirst() }
            if control.hasPrefix("["), let close = control.lastIndex(of: "]"), control.index(after: close) < control.endIndex {
                words.insert(String(control[control.index(after: close)...]), at: 0)
            }
            guard let name = words.first, name.split(separator: "/").last.map(String.init) == module else { continue }
            return (Array(words.dropFirst()), "\(path):\(n + 1)")
        }
        return nil
    }
}

/// A pam.d file's text (at most 1 MiB; nil if it cannot be read).
func readStackFile(_ path: String) -> String? {
    let fd = clibc_open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    let limit = 1 << 20
    var bytes = [UInt8](repeating: 0, count: limit)
    var total = 0
    while total < limit {
        let n = bytes.withUnsafeMutableBytes { b -> Int in
            guard let base = b.baseAddress else { return 0 }
            return read(fd, base + total, limit - total)
        }
        if n < 0 && clibc_errno() == EINTR { continue }
        if n < 0 { return nil }
        if n == 0 { break }
        total += n
    }
    return String(decoding: bytes[..<total], as: UTF8.self)
}
