import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll check [--json]` (root): lints every stack of /etc/pam.d and sshd's effective
/// settings (`sshd -T`) for the traps an admin composing a stack falls into (issue 35; docs/
/// ARCHITECTURE.md, section 5.6), one finding a line with its fix, naming FILE:LINE; exit 1 if
/// any. The stacks are read with `PamStack`, each pam_totp line's settings with
/// `ModuleOptions.load`, and a stack's outcome for a user with `StackVerdict`, as `policy` does.
struct Check: Command {
    static let name = "check"
    static let abstract = "Lint every PAM stack and sshd's effective settings for pam_totp traps, each with its fix (root only)."
    static let discussion = "Exit 1 if anything was found, 0 with one line \"no problems found\" otherwise."
    static let specs: [ArgumentSpec] = [
        JSONOutputOption.spec, ConfigFileOption.spec, PamDirOption.spec,
        .option("--sshd-config", "FILE", "Run sshd -T with this configuration file (default: sshd's own)."),
        .option("--sshd", "PATH", "The sshd binary (default /usr/sbin/sshd; sshd's checks are skipped if it is not there)."),
    ]

    let output: JSONOutputOption
    let site: ConfigFileOption
    let pamdir: PamDirOption
    let sshdConfig: String?
    let sshd: String?

    init(_ arguments: Arguments) throws(CommandError) {
        output = JSONOutputOption(arguments)
        site = ConfigFileOption(arguments)
        pamdir = PamDirOption(arguments)
        sshdConfig = arguments.string("--sshd-config")
        sshd = arguments.string("--sshd")
    }

    struct Finding: Equatable {
        var place: String
        var trap: String
        var problem: String
        var fix: String
    }

    /// One pam_totp line of a stack with its settings for a user in no group (nil: invalid).
    struct TOTPLine {
        var entry: PamStack.Entry
        var options: ModuleOptions?
        var error: String?
        var place: String { utf8Text(entry.place) }
        var argumentsText: String { entry.arguments.map(utf8Text).joined(separator: " ") }
    }

    static let lockers = ["i3lock", "swaylock", "xscreensaver", "kscreensaver", "kde", "kde-fingerprint", "gdm-password",
                          "lightdm", "lightdm-greeter", "sddm", "mate-screensaver", "cinnamon-screensaver", "gnome-screensaver",
                          "xlock", "xsecurelock", "physlock", "light-locker", "slock", "waylock", "hyprlock", "gtklock"]

    func run() throws(CommandError) {
        try Self.requireRoot()
        let directory = pamdir.directory
        guard let names = Self.serviceNames(directory) else { throw CLIError("cannot read the directory \(shown(directory))") }
        var findings: [Finding] = []
        func add(_ f: Finding) { if !findings.contains(f) { findings.append(f) } }
        var stacks: [(name: String, stack: PamStack, lines: [TOTPLine])] = []
        for name in names {
            let stack = PamStack.read(service: Array(name.utf8), directory: Array(directory.utf8)) { readStackFile($0) }
            let lines = stack.modules(named: literal("pam_totp.so")).map { e in self.line(e, service: name) }
            stacks.append((name, stack, lines))
        }

        for s in stacks {
            for p in s.stack.problems {
                add(Finding(place: utf8Text(p.file) + (p.line > 0 ? ":\(p.line)" : ""), trap: "unreadable-stack",
                            problem: "\(utf8Text(p.message)) (in the stack of \(s.name))",
                            fix: "correct or remove the line: libpam cannot follow it either"))
            }
            for l in s.lines {
                if let error = l.error {
                    add(Finding(place: l.place, trap: "invalid-settings",
                                problem: "pam_totp's settings here are invalid (\(error)): it denies every login of \(s.name)",
                                fix: "correct the argument or the configuration file's line it names"))
                }
            }
            Self.afterPassword(s.lines, service: s.name).forEach(add)
            Self.codeOrder(s.lines, service: s.name).forEach(add)
            Self.splitGuards(s.stack, s.lines, service: s.name).forEach(add)
            Self.shadowedNullok(s.lines, service: s.name).forEach(add)
            Self.sentKinds(s.lines).forEach(add)
            Self.daemonReachable(s.lines, service: s.name).forEach(add)
        }
        if let s = stacks.first(where: { $0.name == "totp-enroll" }) { mandatoryGroups(s.stack, s.lines).forEach(add) }
        if let s = stacks.first(where: { $0.name == "sshd" }), !s.lines.isEmpty {
            try sshdChecks(s.stack, s.lines).forEach(add)
        }

        if output.json {
            let items = findings.map { f in
                JSON.object([("file", JSON.string(Array(Self.file(of: f.place).utf8))), ("line", Self.line(of: f.place).map { "\($0)" } ?? "null"),
                             ("trap", JSON.string(Array(f.trap.utf8))), ("problem", JSON.string(Array(f.problem.utf8))),
                             ("fix", JSON.string(Array(f.fix.utf8)))])
            }
            print(JSON.object([("findings", "[" + items.joined(separator: ",") + "]"), ("stacks", "\(stacks.count)"),
                               ("pamdir", JSON.string(Array(directory.utf8)))]))
        } else if findings.isEmpty {
            print("no problems found (\(stacks.count) stacks in \(shown(directory)), and sshd's settings)")
        } else {
            for f in findings { print("\(shown(f.place)): \(shown(f.problem)); fix: \(shown(f.fix))") }
        }
        if !findings.isEmpty { throw .exit(1) }
    }

    static func file(of place: String) -> String {
        guard let colon = place.lastIndex(of: ":"), Int(place[place.index(after: colon)...]) != nil else { return place }
        return String(place[..<colon])
    }

    static func line(of place: String) -> Int? {
        guard let colon = place.lastIndex(of: ":") else { return nil }
        return Int(place[place.index(after: colon)...])
    }

    /// The settings of a pam_totp line on `service` for a user in no group.
    func line(_ e: PamStack.Entry, service: String, isMember: @escaping ([UInt8]) -> Bool = { _ in false }) -> TOTPLine {
        var all = e.arguments
        if let config = site.config { all.append(Array(("config=" + config).utf8)) }
        do {
            let o = try ModuleOptions.load(all, service: Array(service.utf8)) { (g) throws(MFAError) -> Bool in isMember(g) }
            return TOTPLine(entry: e, options: o, error: nil)
        } catch {
            return TOTPLine(entry: e, options: nil, error: CLIError.text(error))
        }
    }

    // MARK: - The traps of one stack

    /// An `after_password` line completes what a `forward_pass` line before the password module
    /// decided; without one before it in the same stack it has nothing to complete.
    static func afterPassword(_ lines: [TOTPLine], service: String) -> [Finding] {
        var out: [Finding] = []
        for (i, l) in lines.enumerated() where l.options?.afterPassword == true {
            let before = lines.prefix(i).contains { $0.options?.forwardPass == true && $0.options?.afterPassword != true }
            if !before {
                out.append(Finding(place: l.place, trap: "after-password-without-forward-pass",
                                   problem: "an after_password line with no forward_pass line before it in the stack of \(service): it has no question to complete",
                                   fix: "put 'auth required pam_totp.so forward_pass' before the password module of this stack (pam_totp(8), SCREEN LOCKERS AND DESKTOPS), or remove this line"))
            }
        }
        return out
    }

    /// pam_totp asks pam-totpd whenever it runs without root (a screen locker runs as the user)
    /// and always in fleet mode: something must accept on the first line's socket.
    static func daemonReachable(_ lines: [TOTPLine], service: String) -> [Finding] {
        let locker = lockers.contains(service)
        guard let first = lines.first, let options = first.options, locker || options.backend == .postgresql else { return [] }
        let socket = utf8Text(options.socket)
        if accepts(socket) { return [] }
        return [locker
            ? Finding(place: first.place, trap: "locker-without-daemon",
                      problem: "the screen locker \(service) runs pam_totp, and nothing accepts on \(socket): pam_totp asks pam-totpd there whenever it runs as the user, so those unlocks are denied",
                      fix: "start pam-totpd: systemctl enable --now pam-totpd.socket (or run pam-totpd), or take pam_totp out of \(service)'s stack")
            : Finding(place: first.place, trap: "fleet-without-daemon",
                      problem: "backend = postgresql and nothing accepts on \(socket): pam_totp asks pam-totpd for every login of \(service), which is denied",
                      fix: "start pam-totpd: systemctl enable --now pam-totpd.socket (or run pam-totpd)")]
    }

    /// A one-field (`forward_pass`) line: without `code_after_password` it checks the code before
    /// the password module, so anyone with a user name can lock the user out and spend codes;
    /// with it, an `after_password` line must follow, or the code is never checked.
    static func codeOrder(_ lines: [TOTPLine], service: String) -> [Finding] {
        var out: [Finding] = []
        for (i, l) in lines.enumerated() {
            guard let o = l.options, o.forwardPass, !o.afterPassword else { continue }
            let after = lines.dropFirst(i + 1).contains { $0.options?.afterPassword == true }
            if o.codeAfterPassword && !after {
                out.append(Finding(place: l.place, trap: "code-never-checked",
                                   problem: "a code_after_password line with no after_password line after it in the stack of \(service): the code is split off and never checked, so the password alone passes",
                                   fix: "put 'auth required pam_totp.so forward_pass after_password' after the password module (pam_totp(8), VPN AND RADIUS)"))
            } else if !o.codeAfterPassword {
                out.append(Finding(place: l.place, trap: "code-before-password",
                                   problem: "this forward_pass line checks the code before the password module in the stack of \(service): anyone who knows a user name can lock the user out (max_failures) and spend their codes with any password",
                                   fix: "add code_after_password to this line and 'auth required pam_totp.so forward_pass after_password' after the password module, which must be requisite (pam_totp(8), VPN AND RADIUS)"))
            }
        }
        return out
    }

    /// Around a `code_after_password` line, what its promise rests on: the password module right
    /// after it ends the stack on a wrong password (`requisite`), nothing lets the stack skip the
    /// `after_password` line, which is itself required, and no other pam_totp line sits between
    /// them (it denies: it cannot tell whether the password was checked).
    static func splitGuards(_ stack: PamStack, _ lines: [TOTPLine], service: String) -> [Finding] {
        var out: [Finding] = []
        let modules = stack.entries.filter { $0.kind == .module }
        for l in lines where l.options?.codeAfterPassword == true && l.options?.afterPassword != true {
            guard let i = modules.firstIndex(where: { $0.file == l.entry.file && $0.line == l.entry.line }) else { continue }
            let rest = modules[(i + 1)...]
            let isTOTP = { (e: PamStack.Entry) in e.moduleName == literal("pam_totp.so") }
            let after = rest.firstIndex { e in isTOTP(e) && lines.contains { $0.entry == e && $0.options?.afterPassword == true } }
            let between = rest[..<(after ?? rest.endIndex)]
            if let password = between.first(where: { !isTOTP($0) }), !endsOnFailure(password.control) {
                out.append(Finding(place: utf8Text(password.place), trap: "password-not-requisite",
                                   problem: "the password module after the code_after_password line \(l.place) does not end the stack on a wrong password in the stack of \(service): the after_password line then checks (counts, spends) the code after a wrong one",
                                   fix: "make it 'auth requisite' (pam_totp(8), VPN AND RADIUS)"))
            }
            for e in between where !isTOTP(e) && skipsOn(e.control) {
                out.append(Finding(place: utf8Text(e.place), trap: "after-password-skippable",
                                   problem: "this line can end the stack or jump before the after_password line in the stack of \(service): the code split off by \(l.place) is then never checked",
                                   fix: "use requisite or required here, no sufficient, done or jump, between the two pam_totp lines"))
            }
            for e in between where isTOTP(e) {
                out.append(Finding(place: utf8Text(e.place), trap: "line-in-the-split",
                                   problem: "a pam_totp line between the code_after_password line \(l.place) and its after_password line in the stack of \(service): it denies every login (it cannot tell whether the password was checked)",
                                   fix: "remove it, or move it after the after_password line"))
            }
            if let a = after, !endsOnFailure(modules[a].control) && modules[a].control != literal("required") {
                out.append(Finding(place: utf8Text(modules[a].place), trap: "after-password-not-required",
                                   problem: "the after_password line's control lets a wrong code through in the stack of \(service)",
                                   fix: "make it 'auth required'"))
            }
        }
        return out
    }

    /// `requisite`, or a bracketed control whose failures die and that neither ends the stack nor jumps.
    static func endsOnFailure(_ control: [UInt8]) -> Bool {
        if control == literal("requisite") { return true }
        let text = utf8Text(control)
        let words = text.split(whereSeparator: { $0 == " " || $0 == "[" || $0 == "]" })
        return text.hasPrefix("[") && words.contains("default=die") && !skipsOn(control)
    }

    /// `sufficient`, or a bracketed control with `done` or a jump (a number).
    static func skipsOn(_ control: [UInt8]) -> Bool {
        if control == literal("sufficient") { return true }
        let text = utf8Text(control)
        guard text.hasPrefix("[") else { return false }
        return text.split(whereSeparator: { $0 == " " || $0 == "[" || $0 == "]" }).contains { word in
            guard let eq = word.firstIndex(of: "=") else { return false }
            let action = word[word.index(after: eq)...]
            return action == "done" || (!action.isEmpty && action.allSatisfy({ $0.isNumber }))
        }
    }

    /// A `nullok` line followed by a strict one: a user with no factor passes the first and is
    /// asked, then denied, by the second (rule 18: a line that does not ask decides nothing).
    static func shadowedNullok(_ lines: [TOTPLine], service: String) -> [Finding] {
        var out: [Finding] = []
        for (i, l) in lines.enumerated() {
            guard let o = l.options, o.nullok, !o.exempt, !o.afterPassword, !o.forwardPass else { continue }
            guard let strict = lines.dropFirst(i + 1).first(where: { ($0.options.map { !$0.nullok && !$0.afterPassword && !$0.exempt }) ?? false }) else { continue }
            out.append(Finding(place: l.place, trap: "nullok-shadowed",
                               problem: "this line's nullok is shadowed by the strict pam_totp line \(strict.place) in the stack of \(service): users with no factor are denied there despite the nullok",
                               fix: "keep one pam_totp line per stack: add nullok to \(strict.place) if users without a factor may log in, or remove one of the two lines"))
        }
        return out
    }

    /// A sent kind (sms, email) that factor_kinds names outright while pam-totpd's configuration
    /// has no program to send it: the module drops it, and users with only a phone or an address
    /// are denied ("None of your factors may be used here").
    static func sentKinds(_ lines: [TOTPLine]) -> [Finding] {
        var out: [Finding] = []
        for l in lines {
            guard let o = l.options, o.backend == .files, o.source(of: .factorKinds) != nil else { continue }
            let source = o.source(of: .factorKinds).map(utf8Text) ?? ""
            let at = source.hasPrefix("the pam.d line") ? l.place : source
            for kind in FactorKind.all where kind.answering == .sent && o.factorKinds & kind.bit != 0 && o.sender(for: kind) == nil {
                let name = "\(kind.name)"
                let key = "\(kind.channel?.senderSetting ?? "")"
                out.append(Finding(place: at, trap: "sent-kind-without-sender",
                                   problem: "factor_kinds offers \(name) but pam-totpd's configuration has no \(key): no code can be sent, and users whose only factor is of that kind are denied",
                                   fix: "set \(key) = /path/to/sender in pam-totpd's configuration file (pam-totpd(8)), or take \(name) out of factor_kinds"))
            }
        }
        return out
    }

    /// Every `[group NAME]` section that sets `nullok = no`: its members with no factor must be
    /// able to enrol, so the totp-enroll service's stack must not deny them.
    func mandatoryGroups(_ stack: PamStack, _ lines: [TOTPLine]) -> [Finding] {
        let path = site.config ?? "/etc/security/pam_totp.conf"
        guard !lines.isEmpty, let text = readStackFile(Array(path.utf8)) else { return [] }
        var out: [Finding] = []
        for (group, at) in Self.strictGroups(text) {
            let member = Array(group.utf8)
            let asMember = lines.map { line($0.entry, service: "totp-enroll", isMember: { $0 == member }) }
            let roles = asMember.map { l in
                LineRole.of(options: l.options, invalid: l.error.map { Array($0.utf8) }, enrolment: .unenrolled,
                            user: literal("a member"), now: Int64(time(nil)))
            }
            let verdict = StackVerdict(roles: roles, places: asMember.map { Array($0.place.utf8) }, user: literal("a member"))
            guard verdict.outcome == .deny, let d = verdict.deciding, d < asMember.count else { continue }
            out.append(Finding(place: "\(path):\(at)", trap: "mandatory-group-cannot-enrol",
                               problem: "[group \(group)] sets nullok = no, and the totp-enroll service's pam_totp line \(asMember[d].place) denies its members who have no factor: they cannot enrol",
                               fix: "let totp-enroll's own stack pass users without a factor: a [service totp-enroll] section with nullok = yes after the group's (totp-enroll asks enrolled users for a current code itself), or no pam_totp line in that stack"))
        }
        return out
    }

    /// The groups whose section sets `nullok = no` (or `nullok=no`), with the header's line.
    static func strictGroups(_ text: [UInt8]) -> [(String, Int)] {
        var out: [(String, Int)] = []
        var current: (String, Int)? = nil
        var number = 0
        for raw in text.split(separator: 0x0A, omittingEmptySubsequences: false) {
            number += 1
            var line = utf8Text(Array(raw))
            if let hash = line.firstIndex(of: "#") { line = String(line[..<hash]) }
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "=" }).map(String.init)
            guard let first = words.first else { continue }
            if first.hasPrefix("[") {
                current = nil
                if first == "[group", words.count >= 2, let last = words.last, last.hasSuffix("]") {
                    let name = words.dropFirst().joined(separator: " ")
                    current = (String(name.dropLast()), number)
                }
                continue
            }
            if let c = current, first == "nullok", words.count == 2, words[1] == "no", !out.contains(where: { $0.0 == c.0 }) {
                out.append(c)
            }
        }
        return out
    }

    // MARK: - sshd

    func sshdChecks(_ stack: PamStack, _ lines: [TOTPLine]) throws(CommandError) -> [Finding] {
        let binary = sshd ?? "/usr/sbin/sshd"
        guard access(binary, X_OK) == 0 else {
            if sshd != nil { throw CLIError("cannot run \(shown(binary))") }
            return []
        }
        var argv = [binary, "-T"]
        if let sshdConfig { argv += ["-f", sshdConfig] }
        guard let run = Self.capture(argv) else { throw CLIError("cannot run \(shown(argv.joined(separator: " ")))") }
        let first = lines.first?.place ?? utf8Text(stack.file)
        guard run.status == 0 else {
            // sshd refuses a configuration whose AuthenticationMethods need a disabled method
            // ("Disabled method "keyboard-interactive" in AuthenticationMethods list ...").
            let why = run.output.split(separator: 0x0A).first.map { utf8Text(Array($0).filter { $0 != 0x0D }) } ?? "no output"
            let kbd = Self.has(why, "keyboard-interactive")
            return [Finding(place: first, trap: kbd ? "keyboard-interactive-unreachable" : "sshd-config-refused",
                            problem: "sshd -T refuses sshd's configuration (\(why))" + (kbd ? ": pam_totp's question cannot reach ssh users" : ""),
                            fix: kbd ? "put KbdInteractiveAuthentication yes in /etc/ssh/sshd_config.d/pam_totp.conf (sshd takes the first value it reads), then reload sshd"
                                     : "correct sshd's configuration until sshd -T accepts it")]
        }
        var settings: [(String, String)] = []
        for raw in run.output.split(separator: 0x0A) {
            let line = utf8Text(Array(raw))
            guard let space = line.firstIndex(of: " ") else { continue }
            settings.append((line[..<space].lowercased(), String(line[line.index(after: space)...])))
        }
        func value(_ key: String) -> String? { settings.first { $0.0 == key }?.1 }
        var out: [Finding] = []
        let sshdFile = sshdConfig ?? "/etc/ssh/sshd_config"
        if value("usepam")?.lowercased() == "no" {
            out.append(Finding(place: first, trap: "keyboard-interactive-unreachable",
                               problem: "sshd runs with UsePAM no: it never runs /etc/pam.d/sshd, so pam_totp is never asked",
                               fix: "set UsePAM yes in a file of /etc/ssh/sshd_config.d/ (sshd takes the first value it reads) and reload sshd"))
        }
        let kbd = (value("kbdinteractiveauthentication") ?? value("challengeresponseauthentication"))?.lowercased()
        if kbd == "no" {
            let at = Self.firstSetting(["kbdinteractiveauthentication", "challengeresponseauthentication"], in: sshdFile)
            out.append(Finding(place: first, trap: "keyboard-interactive-unreachable",
                               problem: "sshd's effective KbdInteractiveAuthentication is no\(at.map { " (set at \($0))" } ?? ""): pam_totp's question cannot reach ssh users, who get a password prompt or a refusal",
                               fix: "put KbdInteractiveAuthentication yes in /etc/ssh/sshd_config.d/pam_totp.conf: sshd takes the first value it reads and Debian's sshd_config reads the drop-ins before its own 'no'; then reload sshd"))
        }
        let methods = value("authenticationmethods") ?? "any"
        if methods != "any" { out += Self.methodsChecks(methods, stack, lines, first: first) }
        return out
    }

    /// The traps of sshd's AuthenticationMethods: keyboard-interactive missing, and a public-key
    /// stack that still asks the password or keeps an earlier pam_totp line.
    static func methodsChecks(_ methods: String, _ stack: PamStack, _ lines: [TOTPLine], first: String) -> [Finding] {
        var out: [Finding] = []
        let lists = methods.split(separator: " ").map(String.init)
        if !lists.contains(where: { $0.split(separator: ",").contains { $0.hasPrefix("keyboard-interactive") } }) {
            out.append(Finding(place: first, trap: "keyboard-interactive-unreachable",
                               problem: "sshd's AuthenticationMethods (\(methods)) does not include keyboard-interactive: pam_totp is never asked over ssh",
                               fix: "use AuthenticationMethods publickey,keyboard-interactive (or keyboard-interactive alone) in sshd's configuration"))
        }
        let publicKeyFirst = lists.contains { l in
            let m = l.split(separator: ",").map(String.init)
            return m.count >= 2 && m.first == "publickey" && m.contains { $0.hasPrefix("keyboard-interactive") }
        }
        if publicKeyFirst {
            if let include = stack.entries.first(where: { $0.kind != .module && $0.moduleName == literal("common-auth") }) {
                out.append(Finding(place: utf8Text(include.place), trap: "publickey-stack-asks-password",
                                   problem: "sshd asks a public key, then keyboard-interactive, and its stack includes common-auth: after the key, ssh users are asked for their password too",
                                   fix: "in /etc/pam.d/sshd replace this include by 'auth required pam_totp.so' alone (README, public-key section)"))
            }
            for l in lines.dropLast() {
                out.append(Finding(place: l.place, trap: "publickey-stack-earlier-line",
                                   problem: "sshd asks a public key, then keyboard-interactive, and its stack keeps this earlier pam_totp line before \(lines.last?.place ?? "")",
                                   fix: "keep only the one pam_totp line of sshd's public-key stack: remove this one (README, public-key section)"))
            }
        }
        return out
    }

    /// "FILE:LINE" of the first line of `file` that sets one of `keys` (sshd's first value wins;
    /// Include lines are not followed: sshd -T is the truth, this only points at a likely place).
    static func firstSetting(_ keys: [String], in file: String) -> String? {
        guard let text = readStackFile(Array(file.utf8)) else { return nil }
        var number = 0
        for raw in text.split(separator: 0x0A, omittingEmptySubsequences: false) {
            number += 1
            let words = utf8Text(Array(raw)).split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "=" })
            if let key = words.first?.lowercased(), keys.contains(key) { return "\(file):\(number)" }
        }
        return nil
    }

    // MARK: - System

    /// The services of a pam.d directory: every file but hidden ones and package leftovers.
    static func serviceNames(_ directory: String) -> [String]? {
        guard let dir = opendir(directory) else { return nil }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir), names.count < 4096 {
            guard let c = clibc_dirent_name(entry) else { continue }
            let name = String(cString: c)
            if name.hasPrefix(".") || name.hasSuffix("~") || Self.has(name, ".dpkg-") || Self.has(name, ".ucf-") { continue }
            guard PamStack.isServiceName(Array(name.utf8)) else { continue }
            var st = stat()
            guard stat(directory + "/" + name, &st) == 0, st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG) else { continue }
            names.append(name)
        }
        names.sort()
        return names
    }

    /// Whether `text` holds `part` (no Foundation in Embedded Swift).
    static func has(_ text: String, _ part: String) -> Bool {
        let t = Array(text.utf8), p = Array(part.utf8)
        guard !p.isEmpty, t.count >= p.count else { return p.isEmpty }
        return (0...(t.count - p.count)).contains { t[$0..<($0 + p.count)].elementsEqual(p) }
    }

    /// Whether something accepts connections on the Unix socket `path` (pam-totpd, or systemd
    /// holding its socket).
    static func accepts(_ path: String) -> Bool {
        let fd = clibc_socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return clibc_connect_unix(fd, path) == 0
    }

    /// Runs `argv` (an absolute path first) with standard input from /dev/null and standard
    /// output and error into a pipe: its exit status and at most 1 MiB of output, or nil if it
    /// could not be run or did not finish within 20 seconds (then it is killed).
    static func capture(_ argv: [String]) -> (status: Int32, output: [UInt8])? {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return nil }
        for fd in fds { _ = clibc_fcntl_int(fd, F_SETFD, FD_CLOEXEC) }
        let devnull = clibc_open("/dev/null", O_RDONLY | O_CLOEXEC, 0)
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) }
        cargs.append(nil)
        defer { for p in cargs { free(p) } }
        let pid = fork()
        if pid == 0 {
            if devnull >= 0 { dup2(devnull, 0) }
            dup2(fds[1], 1)
            dup2(fds[1], 2)
            if let path = cargs[0] { execv(path, &cargs) }
            _exit(127)
        }
        close(fds[1])
        if devnull >= 0 { close(devnull) }
        defer { close(fds[0]) }
        guard pid > 0 else { return nil }
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let deadline = clibc_monotonic_ms() + 20_000
        var timedOut = false
        while output.count < 1 << 20 {
            let left = deadline - clibc_monotonic_ms()
            if left <= 0 { timedOut = true; break }
            var p = pollfd(fd: fds[0], events: Int16(POLLIN), revents: 0)
            let ready = clibc_poll(&p, 1, Int32(min(left, 1000)))
            if ready < 0 && clibc_errno() == EINTR { continue }
            if ready <= 0 { continue }
            let n = buffer.withUnsafeMutableBytes { read(fds[0], $0.baseAddress, $0.count) }
            if n < 0 && clibc_errno() == EINTR { continue }
            if n <= 0 { break }
            output += buffer.prefix(n)
        }
        if timedOut || output.count >= 1 << 20 { kill(pid, SIGKILL) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 { guard clibc_errno() == EINTR else { return nil } }
        guard !timedOut, status & 0x7F == 0 else { return nil }
        return ((status >> 8) & 0xFF, output)
    }
}
