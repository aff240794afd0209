import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll policy --user NAME --service NAME [--json]`: the whole auth stack of that PAM
/// service as libpam reads it (`PamStack`: includes, substacks, `-auth` lines followed), every
/// pam_totp line in order with the settings it gets for that user and where each came from —
/// the built-in default, the file's global part, a `[group]`/`[service]` section, the pam.d
/// line, or the stricter of the file and the line (docs/ARCHITECTURE.md, section 4, rule 16) —
/// and the outcome for the user (`ask`, `pass`, `deny`) by rule 18: the first line that asks
/// decides (`StackVerdict`). Whether the user is enrolled is read from each line's store as
/// `status --user` reads it (pam-totpd in fleet mode). Root only: it reads another user's
/// groups and enrolment, and every stack.
struct Policy: Command {
    static let name = "policy"
    static let abstract = "Show every pam_totp line of a PAM service's stack, the settings each gets for a user and where they came from, and the outcome for that user (root only)."
    static let specs = PolicyLoginOptions.specs + [ConfigFileOption.spec, PamDirOption.spec, JSONOutputOption.spec]

    let login: PolicyLoginOptions
    let site: ConfigFileOption
    let pamdir: PamDirOption
    let output: JSONOutputOption

    init(_ arguments: Arguments) throws(CommandError) {
        login = try PolicyLoginOptions(arguments)
        site = ConfigFileOption(arguments)
        pamdir = PamDirOption(arguments)
        output = JSONOutputOption(arguments)
    }

    /// One pam_totp line as explained.
    struct Explained {
        var file: String?
        var line: Int?
        var type: String
        var control: String
        var module: String
        var arguments: [String]
        var options: ModuleOptions?
        var invalid: String?
        var enrolment: LineEnrolment
        var role: LineRole
    }

    func run() throws(CommandError) {
        try Self.requireRoot()
        let (service, config) = (login.service, site.config)
        guard let account = getpwnam(login.user), let canonical = account.pointee.pw_name else {
            throw CLIError("no such account: \(shown(login.user))")
        }
        let user = String(cString: canonical)
        let uid = account.pointee.pw_uid, gid = account.pointee.pw_gid
        let groups = Self.groups(of: user, gid: gid)
        let now = Int64(time(nil))
        guard PamStack.isServiceName(Array(service.utf8)) else { throw .usage("--service must be a PAM service name (a file name in \(pamdir.directory))") }

        // The lines: --arguments (one assumed line), else every pam_totp line of the stack.
        var stack: PamStack? = nil
        var lines: [(file: String?, line: Int?, type: String, control: String, module: String, arguments: [String])] = []
        if let arguments = login.arguments {
            lines = [(nil, nil, "auth", "required", "pam_totp.so", arguments.split(separator: " ").map(String.init))]
        } else {
            let read = PamStack.read(service: Array(service.utf8), directory: Array(pamdir.directory.utf8)) { readStackFile($0) }
            stack = read
            for e in read.modules(named: literal("pam_totp.so")) {
                lines.append((utf8Text(e.file), e.line, e.quiet ? "-auth" : "auth", utf8Text(e.control), utf8Text(e.module),
                              e.arguments.map(utf8Text)))
            }
        }

        var stores = EnrolmentCache()
        var explained: [Explained] = []
        for l in lines {
            var all = l.arguments.map { Array($0.utf8) }
            if let config { all.append(Array(("config=" + config).utf8)) }
            var options: ModuleOptions? = nil
            var invalid: String? = nil
            do {
                options = try ModuleOptions.load(all, service: Array(service.utf8)) { (group) throws(MFAError) -> Bool in
                    guard let g = getgrnam(String(decoding: group, as: UTF8.self)) else { return false }
                    return groups.contains(g.pointee.gr_gid)
                }
            } catch { invalid = CLIError.text(error) }
            let enrolment = options.map { stores.enrolment(of: user, uid: uid, options: $0) } ?? .unenrolled
            let role = LineRole.of(options: options, invalid: invalid.map { Array($0.utf8) }, enrolment: enrolment,
                                   user: Array(user.utf8), now: now)
            explained.append(Explained(file: l.file, line: l.line, type: l.type, control: l.control, module: l.module,
                                       arguments: l.arguments, options: options,
                                       invalid: invalid, enrolment: enrolment, role: role))
        }
        let places = explained.map { e in Array((e.file.map { "\($0):\(e.line ?? 0)" } ?? "--arguments").utf8) }
        let verdict = StackVerdict(roles: explained.map { $0.role }, places: places, user: Array(user.utf8))
        if output.json {
            print(Self.json(user: user, uid: uid, service: service, stack: stack, lines: explained, verdict: verdict))
        } else {
            print(Self.text(user: user, uid: uid, service: service, stack: stack, lines: explained, verdict: verdict), terminator: "")
        }
    }

    // MARK: - Output

    static func value(of setting: PolicySetting, in options: ModuleOptions) -> (text: String, json: String) {
        switch setting {
        case .nullok: return (options.nullok ? "yes" : "no", options.nullok ? "true" : "false")
        case .exempt: return (options.exempt ? "yes" : "no", options.exempt ? "true" : "false")
        case .adjacentIntervals: return (String(options.adjacentIntervals), String(options.adjacentIntervals))
        case .hotpWindow: return (String(options.hotpWindow), String(options.hotpWindow))
        case .hotpResyncWindow: return (String(options.hotpResyncWindow), String(options.hotpResyncWindow))
        case .maxFailures: return (String(options.maxFailures), String(options.maxFailures))
        case .lockout: return ("\(options.lockoutSeconds) s", String(options.lockoutSeconds))
        case .factorKinds:
            let names = ModuleOptions.kindNames(options.factorKinds)
            return (String(decoding: names, as: UTF8.self), JSON.string(names))
        case .oobDigits: return (String(options.oobDigits), String(options.oobDigits))
        case .oobLifetime: return ("\(options.oobLifetime) s", String(options.oobLifetime))
        case .oobMaxAttempts: return (String(options.oobMaxAttempts), String(options.oobMaxAttempts))
        case .oobResendInterval: return ("\(options.oobResendInterval) s", String(options.oobResendInterval))
        case .oobMaxPerHour: return (String(options.oobMaxPerHour), String(options.oobMaxPerHour))
        case .oobMaxPerDay: return (String(options.oobMaxPerDay), String(options.oobMaxPerDay))
        }
    }

    static func source(of setting: PolicySetting, in options: ModuleOptions) -> String {
        options.source(of: setting).map { String(decoding: $0, as: UTF8.self) } ?? "the built-in default"
    }

    static func text(user: String, uid: UInt32, service: String, stack: PamStack?, lines: [Explained], verdict: StackVerdict) -> String {
        var out = "pam_totp's policy for \(shown(user)) (uid \(uid)) on service \(shown(service))"
        if let stack { out += " (\(shown(stack.file))\(stack.usedOther ? ": there is no file for the service, libpam uses this one" : "")):\n" } else { out += ":\n" }
        for p in stack?.problems ?? [] { out += "  warning: \(shown(p.text))\n" }
        if lines.isEmpty { out += "  no pam_totp line in the auth stack (includes followed): pam_totp does not run there\n" }
        for (i, l) in lines.enumerated() {
            let at = l.file.map { "\(shown($0)):\(l.line ?? 0)" } ?? "--arguments"
            let words = [l.type, l.control, l.module] + l.arguments
            out += "pam_totp line \(i + 1) of \(lines.count): \(at): \(words.map(shown).joined(separator: " "))\n"
            if let options = l.options {
                for setting in PolicySetting.all {
                    let v = value(of: setting, in: options).text
                    let name = setting.name.string
                    out += "  " + name + String(repeating: " ", count: max(1, 20 - name.count)) + v
                        + String(repeating: " ", count: max(1, 8 - v.count)) + shown(source(of: setting, in: options)) + "\n"
                }
            } else if let invalid = l.invalid {
                out += "  invalid: \(shown(invalid))\n"
            }
            if let d = verdict.deciding, i > d {
                out += "  for \(shown(user)): line \(d + 1) decided: this line asks nothing and returns its result\n"
            } else {
                out += "  for \(shown(user)): \(shown(l.role.reason))\n"
            }
        }
        out += "outcome: \(utf8Text(verdict.outcome.name)): \(shown(verdict.reason))\n"
        return out
    }

    static func json(user: String, uid: UInt32, service: String, stack: PamStack?, lines: [Explained], verdict: StackVerdict) -> String {
        let items = lines.enumerated().map { (i, l) -> String in
            var fields: [(String, String)] = [
                ("file", l.file.map { JSON.string(Array($0.utf8)) } ?? "null"),
                ("line", l.line.map { "\($0)" } ?? "null"),
                ("control", JSON.string(Array(l.control.utf8))),
                ("module", JSON.string(Array(l.module.utf8))),
                ("arguments", "[" + l.arguments.map { JSON.string(Array($0.utf8)) }.joined(separator: ",") + "]"),
            ]
            if let options = l.options {
                fields.append(("settings", JSON.object(PolicySetting.all.map { s in
                    (s.name.string, JSON.object([("value", value(of: s, in: options).json),
                                                 ("source", JSON.string(Array(source(of: s, in: options).utf8)))]))
                })))
            } else {
                fields.append(("settings", "null"))
                fields.append(("error", JSON.string(Array((l.invalid ?? "").utf8))))
            }
            let enrolled: String
            switch l.enrolment {
            case .enrolled: enrolled = "true"
            case .unenrolled: enrolled = "false"
            case .unreadable: enrolled = "null"
            }
            fields.append(("enrolled", enrolled))
            fields.append(("decides", verdict.deciding == i ? "true" : "false"))
            if let d = verdict.deciding, i > d {
                fields.append(("result", JSON.string(verdict.outcome.name)))
                fields.append(("reason", JSON.string(Array("line \(d + 1) decided: this line asks nothing and returns its result".utf8))))
            } else {
                fields.append(("result", JSON.string(l.role.outcome.name)))
                fields.append(("reason", JSON.string(l.role.reason)))
            }
            return JSON.object(fields)
        }
        let deciding = verdict.deciding.flatMap { $0 < lines.count ? lines[$0] : nil }
        return JSON.object([
            ("user", JSON.string(Array(user.utf8))),
            ("uid", "\(uid)"),
            ("service", JSON.string(Array(service.utf8))),
            ("stack", stack.map { JSON.string($0.file) } ?? "null"),
            ("lines", "[" + items.joined(separator: ",") + "]"),
            ("outcome", JSON.string(verdict.outcome.name)),
            ("deciding_line", deciding.map { d in
                JSON.object([("file", d.file.map { JSON.string(Array($0.utf8)) } ?? "null"), ("line", d.line.map { "\($0)" } ?? "null")])
            } ?? "null"),
            ("reason", JSON.string(verdict.reason)),
            ("problems", "[" + (stack?.problems ?? []).map { JSON.string($0.text) }.joined(separator: ",") + "]"),
        ])
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

/// Whether a user is enrolled in the store a line names, read once per store (backend, store,
/// socket) as `status --user` reads it: the files, or pam-totpd in fleet mode. A record bound to
/// another uid is no enrolment (docs/ARCHITECTURE.md, section 4, rule 12); a store directory
/// that does not exist holds nobody (and is not created).
struct EnrolmentCache {
    var known: [(key: [UInt8], enrolment: LineEnrolment)] = []

    mutating func enrolment(of user: String, uid: UInt32, options: ModuleOptions) -> LineEnrolment {
        var key: [UInt8] = [options.backend == .postgresql ? 0x70 : 0x66]
        key += options.store + [0] + options.socket
        if let found = known.first(where: { $0.key == key }) { return found.enrolment }
        let result = Self.read(user: user, uid: uid, options: options)
        known.append((key, result))
        return result
    }

    static func read(user: String, uid: UInt32, options: ModuleOptions) -> LineEnrolment {
        let path = String(decoding: options.store, as: UTF8.self)
        let fleet = options.backend == .postgresql
        if !fleet && access(path, F_OK) != 0 && clibc_errno() == ENOENT { return .unenrolled }
        let status: UserStatus?
        do {
            let store = try CallerContext.openStore(at: path, socket: fleet ? String(decoding: options.socket, as: UTF8.self) : nil)
            status = try storeCall { () throws(MFAError) in try store.status(user: Array(user.utf8)) }
        } catch {
            return .unreadable(Array(error.description.utf8))
        }
        guard let record = status?.record, record.isEnrolled else { return .unenrolled }
        if let bound = record.uid, bound != uid { return .unenrolled }
        return .enrolled(record)
    }
}

/// `--user`, `--service` and `--arguments` of `policy`: the login whose policy is shown.
struct PolicyLoginOptions {
    static let specs: [ArgumentSpec] = [
        .option("--user", "NAME", "The user.", required: true),
        .option("--service", "NAME", "The PAM service (a file in /etc/pam.d).", required: true),
        .option("--arguments", "ARGS", "Assume one pam_totp line with these arguments instead of the service's stack."),
    ]

    let user: String
    let service: String
    let arguments: String?

    init(_ arguments: Arguments) throws(CommandError) {
        user = try arguments.required("--user")
        service = try arguments.required("--service")
        self.arguments = arguments.string("--arguments")
    }
}

/// `--pamdir DIR` of `policy` and `check` (root only, as both are): the PAM stacks read
/// instead of /etc/pam.d, for tests and for checking a staged tree.
struct PamDirOption {
    static let spec = ArgumentSpec.option("--pamdir", "DIR", "Read the PAM stacks from DIR instead of /etc/pam.d.")
    let directory: String
    init(_ arguments: Arguments) { directory = arguments.string("--pamdir") ?? "/etc/pam.d" }
}

func utf8Text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

/// A pam.d file's bytes (at most PamStack.maxFileSize + 1, so a larger one is seen as too
/// large; nil if it cannot be read). Opened without blocking (a FIFO is not waited for).
func readStackFile(_ path: [UInt8]) -> [UInt8]? {
    let fd = clibc_open(String(decoding: path, as: UTF8.self), O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    let limit = PamStack.maxFileSize + 1
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
    return Array(bytes[..<total])
}
