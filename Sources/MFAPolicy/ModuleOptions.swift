import CLibc
import MFACrypto
import MFASystem

/// The module's settings (docs/ARCHITECTURE.md, section 5): from `/etc/security/pam_totp.conf` (or `config=FILE`),
/// then the pam.d arguments, which override the file except for the policy settings
/// (`PolicySetting`): where both set one, the stricter value wins, so a pam.d line (the
/// pam-auth-update profile's `nullok`) cannot loosen what the site's file requires, nor the
/// file what a line requires. Parsing is strict: an unknown name, a
/// malformed or out-of-range value throws `invalidOption` naming it (and, for the file, the
/// file and line), and the module denies; nothing is silently ignored.
public struct ModuleOptions: Equatable, Sendable {
    // Computed, not stored: a global array would be allocated on every load of the module and
    // never freed (libpam dlopens and dlcloses it around every login).
    public static var defaultConfigFile: [UInt8] { literal("/etc/security/pam_totp.conf") }
    public static var defaultPrompt: [UInt8] { literal("Verification code: ") }
    public static var defaultForwardPassPrompt: [UInt8] { literal("Password and verification code: ") }
    public static var defaultSocket: [UInt8] { literal("/run/pam-totp/socket") }
    public static var defaultStore: [UInt8] { literal("/var/lib/pam-totp") }
    /// sun_path holds 108 bytes with its NUL.
    public static let maxSocketPathLength = 107
    public static let maxFailuresRange: ClosedRange<UInt64> = 1...100
    public static let lockoutRange: ClosedRange<UInt64> = 0...86_400
    static let maxConfigSize = 64 * 1024

    public var adjacentIntervals: Int = TOTPVerifier.defaultAdjacentIntervals
    /// How many counters past the last used one a counter-based (HOTP) factor's code may be.
    public var hotpWindow: Int = HOTPWindow.defaultSize
    /// How many counters past the next unused one a code may start a resync (0: never).
    public var hotpResyncWindow: Int = HOTPWindow.defaultResync
    public var nullok = false
    public var store: [UInt8] = ModuleOptions.defaultStore
    public var maxFailures: UInt32 = 10
    /// pam-totpd, for a caller without root: the site's max_failures, which locks at its every
    /// multiple whatever `maxFailures` a request picked (nil: only `maxFailures`). Never parsed.
    public var siteMaxFailures: UInt32? = nil
    public var lockoutSeconds: Int64 = 300
    /// nil: the default for the mode (`defaultPrompt`, or `defaultForwardPassPrompt`).
    public var customPrompt: [UInt8]? = nil
    public var debug = false
    /// One question for password and code; the code is the answer's trailing digits and the
    /// rest becomes PAM_AUTHTOK for the next module.
    public var forwardPass = false
    /// `after_password` (with forward_pass, a pam.d line only): the line after the password
    /// module of a one-prompt stack. It asks nothing: it completes what the forward_pass line
    /// before the password module decided (pam_totp(8), "SCREEN LOCKERS AND DESKTOPS").
    public var afterPassword = false
    /// `code_after_password` (with forward_pass, a pam.d line only): the line before the
    /// password module of a one-field stack splits the answer and hands the password on, but
    /// checks no code; the `after_password` line checks it, so only after the password passed:
    /// a stranger without it counts no failure and spends no code (pam_totp(8), "VPN AND RADIUS").
    public var codeAfterPassword = false
    /// pam-totpd's socket: where a caller without root asks.
    public var socket: [UInt8] = ModuleOptions.defaultSocket
    /// `exempt`: the user is not asked for a code and the module returns PAM_IGNORE (never
    /// PAM_SUCCESS). Usually set by a `[group NAME]` section (a break-glass account).
    public var exempt = false
    /// Where `exempt` was set ("[group NAME] at FILE:LINE", "FILE:LINE", "the pam.d line"),
    /// for the log line.
    public var exemptBy: [UInt8] = []
    /// `enroll_at_login=YYYY-MM-DD`: until the end of that day (UTC), a user with no factor is
    /// offered enrolment through the PAM conversation; the Unix time the offer ends (exclusive).
    public var enrollAtLoginUntil: Int64? = nil
    /// `factor_kinds`: which kinds of factor are offered and accepted (`FactorKind.bit`; default
    /// every kind). A section may narrow it (administrators: `totp`).
    public var factorKinds: UInt8 = FactorKind.allBits
    /// Sent codes (text message, email): digits, seconds valid, wrong answers before void, the
    /// least seconds between two sends to an account, the most sends per account per hour and per day.
    public var oobDigits: Int = 6
    public var oobLifetime: Int64 = 300
    public var oobMaxAttempts: Int = 3
    public var oobResendInterval: Int64 = 30
    public var oobMaxPerHour: Int = 5
    public var oobMaxPerDay: Int = 20
    public static let oobDigitsRange: ClosedRange<UInt64> = 6...8
    public static let oobLifetimeRange: ClosedRange<UInt64> = 30...3600
    public static let oobMaxAttemptsRange: ClosedRange<UInt64> = 1...10
    public static let oobResendIntervalRange: ClosedRange<UInt64> = 0...3600
    public static let oobMaxSendsRange: ClosedRange<UInt64> = 1...32  // (UserState.maxSends)
    /// pam-totpd only (its file; a pam.d line may not set them): the programs that send a code
    /// (`PATH DESTINATION`, the message on standard input), the message templates (`%c` code,
    /// `%h` host, `%m` minutes; checked by pam-totpd when it starts) and the most sends per minute
    /// for the whole daemon.
    public var smsCommand: [UInt8]? = nil
    public var emailCommand: [UInt8]? = nil
    public var smsText: [UInt8]? = nil
    public var emailSubject: [UInt8]? = nil
    public var emailText: [UInt8]? = nil
    public var oobMaxPerMinute: Int = 60
    /// pam-totpd only (its file): the most sends to one destination, whatever the account, per
    /// hour and per day (made-up or many accounts bring no new allowance for one number), and
    /// the E.164 country prefixes text messages may go to (empty: any). The fleet's are the
    /// database's settings row (docs/FLEET.md).
    public var oobDestinationMaxPerHour: Int = 5
    public var oobDestinationMaxPerDay: Int = 20
    public var oobAllowedPrefixes: [[UInt8]] = []
    /// pam-totpd only (its file): system accounts (`trusted_callers = freerad`) that may ask
    /// about any user, as root may, with four times a user's share of the daemon's capacity; their requests
    /// get the site's limits, as any caller without root, and never the admin operations.
    public var trustedCallers: [[UInt8]] = []
    /// Where each policy setting came from, in the order applied (the last one of a setting is
    /// in force): for `totp-enroll policy`.
    public var sources: [PolicySource] = []
    /// Whether a `[service NAME]` section for this login's service set nullok (it then wins
    /// over the enrolment service's built-in rule, `applyEnrolmentService`).
    var nullokFromServiceSection = false
    /// The longest section name (`[group NAME]`, `[service NAME]`) the file may hold.
    public static let maxSectionNameLength = 256

    /// Where enrolments live: this host's files, or PostgreSQL through pam-totpd (fleet mode,
    /// docs/ARCHITECTURE.md, section 8), which the module then asks even as root.
    public var backend: Backend = .files
    /// pam-totpd's libpq CONNINFO (fleet mode). Only pam-totpd uses it; only the
    /// configuration file may set it (pam.d arguments are world-readable).
    public var postgresql: [UInt8]? = nil
    /// `postgresql_file = PATH`: pam-totpd reads the CONNINFO from this root-only file, so the
    /// configuration file, which every caller's module reads, holds no credential.
    public var postgresqlFile: [UInt8]? = nil
    /// `host_credential = PATH`: this host's own credential (pam-totpd add-host), a root-only
    /// file; every database call carries one made from it (rule 20; a pooled role needs it).
    public var hostCredential: [UInt8]? = nil
    public static let maxConninfoLength = 4096
    /// `db_connect_timeout = SECONDS` (1–120, default 5): how long pam-totpd waits for a new
    /// database connection (TLS across a long link takes several round trips).
    public var dbConnectTimeout = 5
    /// `db_idle_timeout = SECONDS` (1–86400, default 60): pam-totpd closes a database
    /// connection idle this long (a fleet of hosts holds no server connections it does not use).
    public var dbIdleTimeout = 60

    public enum Backend: Equatable, Sendable {
        case files
        case postgresql
    }

    /// The kinds a login may offer: `factorKinds`, less a sent kind whose program (`sms_command`,
    /// `email_command`) the configuration does not name: nothing can be sent, so nothing is offered,
    /// and a site without senders pays no look-up before the prompt (docs/ARCHITECTURE.md, 2.3).
    public var offeredKinds: UInt8 {
        var kinds = factorKinds
        for kind in FactorKind.all where kind.answering == .sent && sender(for: kind) == nil { kinds &= ~kind.bit }
        return kinds
    }

    /// The program that sends `kind`'s codes (`sms_command`, `email_command`); nil: none is
    /// configured, or the kind's codes are not sent.
    public func sender(for kind: FactorKind) -> [UInt8]? {
        switch kind {
        case .sms: return smsCommand
        case .email: return emailCommand
        case .totp, .hotp: return nil
        }
    }

    /// The question the module asks.
    public var prompt: [UInt8] { customPrompt ?? (forwardPass ? Self.defaultForwardPassPrompt : Self.defaultPrompt) }

    public init() {}

    /// Settings from the pam.d arguments alone (no configuration file).
    public static func parse(_ arguments: [[UInt8]]) throws(MFAError) -> ModuleOptions {
        var o = ModuleOptions()
        for arg in arguments where !isConfigArgument(arg) { try o.apply(arg, origin: Message([]), fromFile: false) }
        return o
    }

    /// Settings as the module uses them: the configuration file (`config=FILE` among the
    /// arguments, else the default file if it exists) — its global part, then each section
    /// that matches, in file order — then the arguments. `service` is the PAM service;
    /// `isMember(group)` says whether the user belongs to a group (primary or supplementary)
    /// and is asked only for the file's `[group NAME]` sections.
    @_optimize(size)  // built small: a few short lines per login (docs/benchmarks.md)
    public static func load(_ arguments: [[UInt8]], service: [UInt8] = [],
                            isMember: (_ group: [UInt8]) throws(MFAError) -> Bool = { _ in false }) throws(MFAError) -> ModuleOptions {
        var path = defaultConfigFile
        var explicit = false
        for arg in arguments where isConfigArgument(arg) {
            path = Array(arg.dropFirst(7))
            explicit = true
            guard path.first == 0x2F else { throw .invalidOption("config must be an absolute path: " + printable(arg)) }
        }
        var o = ModuleOptions()
        if let text = try readConfigFile(path, required: explicit) {
            try o.applyConfig(text, file: printable(path), service: service, isMember: isMember)
        }
        let file = o
        for arg in arguments where !isConfigArgument(arg) {
            try o.apply(arg, origin: Message([]), fromFile: false)
            guard let setting = PolicySetting(name: arg.firstIndex(of: ASCII.equals).map { Array(arg[..<$0]) } ?? arg) else { continue }
            if let fromFile = file.source(of: setting) {
                o.keepStricter(setting, file: file, fileSource: fromFile)
            } else {
                o.sources.append(PolicySource(setting: setting, from: literal("the pam.d line")))
            }
        }
        o.applyEnrolmentService(service)
        return o
    }

    /// The PAM service of `totp-enroll` itself: a user with no factor is not asked for a code
    /// there, whatever nullok says — it is how they add a first factor (after the password,
    /// the same proof any first factor needs), and the tool asks a user who has a factor for a
    /// current code itself (docs/ARCHITECTURE.md, section 4.3). Without it, a `[group NAME]
    /// nullok = no` section locks its un-enrolled members out of enrolment, while sshd, su and
    /// login still refuse them. Only the site file's own `[service totp-enroll]` section setting
    /// nullok overrides it.
    public static var enrolmentService: [UInt8] { literal("totp-enroll") }

    mutating func applyEnrolmentService(_ service: [UInt8]) {
        guard service == Self.enrolmentService else { return }
        enrollAtLoginUntil = nil  // the tool enrols; its re-authentication offers no enrolment of its own
        guard !nullok, !nullokFromServiceSection else { return }
        nullok = true
        sources.append(PolicySource(setting: .nullok, from: literal(
            "built in for the totp-enroll service: a user without a factor adds a first one there ([service totp-enroll] nullok = no overrides it)")))
    }

    /// Where `setting`'s value in force came from; nil: the built-in default.
    public func source(of setting: PolicySetting) -> [UInt8]? {
        sources.last { $0.setting == setting }?.from
    }

    /// After a pam.d line set `setting` that the file set too: the file's value back unless
    /// the line's is stricter.
    @_optimize(size)  // built small: a few short lines per login (docs/benchmarks.md)
    mutating func keepStricter(_ setting: PolicySetting, file: ModuleOptions, fileSource: [UInt8]) {
        let lineStricter: Bool
        switch setting {
        case .nullok: lineStricter = !nullok && file.nullok
        case .exempt: lineStricter = !exempt && file.exempt
        case .adjacentIntervals: lineStricter = adjacentIntervals < file.adjacentIntervals
        case .hotpWindow: lineStricter = hotpWindow < file.hotpWindow
        case .hotpResyncWindow: lineStricter = hotpResyncWindow < file.hotpResyncWindow
        case .maxFailures: lineStricter = maxFailures < file.maxFailures
        case .lockout: lineStricter = lockoutSeconds > file.lockoutSeconds
        case .factorKinds:
            // Sets meet: only the kinds both allow (never one the file does not).
            let both = factorKinds & file.factorKinds
            lineStricter = both == factorKinds
            factorKinds = both
        case .oobDigits: lineStricter = oobDigits > file.oobDigits
        case .oobLifetime: lineStricter = oobLifetime < file.oobLifetime
        case .oobMaxAttempts: lineStricter = oobMaxAttempts < file.oobMaxAttempts
        case .oobResendInterval: lineStricter = oobResendInterval > file.oobResendInterval
        case .oobMaxPerHour: lineStricter = oobMaxPerHour < file.oobMaxPerHour
        case .oobMaxPerDay: lineStricter = oobMaxPerDay < file.oobMaxPerDay
        }
        if lineStricter {
            sources.append(PolicySource(setting: setting, from: literal("the pam.d line (stricter than ") + fileSource + [0x29]))
            return
        }
        switch setting {
        case .nullok: nullok = file.nullok
        case .exempt: exempt = file.exempt; exemptBy = file.exemptBy
        case .adjacentIntervals: adjacentIntervals = file.adjacentIntervals
        case .hotpWindow: hotpWindow = file.hotpWindow
        case .hotpResyncWindow: hotpResyncWindow = file.hotpResyncWindow
        case .maxFailures: maxFailures = file.maxFailures
        case .lockout: lockoutSeconds = file.lockoutSeconds
        case .factorKinds: factorKinds &= file.factorKinds
        case .oobDigits: oobDigits = file.oobDigits
        case .oobLifetime: oobLifetime = file.oobLifetime
        case .oobMaxAttempts: oobMaxAttempts = file.oobMaxAttempts
        case .oobResendInterval: oobResendInterval = file.oobResendInterval
        case .oobMaxPerHour: oobMaxPerHour = file.oobMaxPerHour
        case .oobMaxPerDay: oobMaxPerDay = file.oobMaxPerDay
        }
        sources.append(PolicySource(setting: setting, from: fileSource + literal(" (the pam.d line's is not stricter)")))
    }

    static func isConfigArgument(_ arg: [UInt8]) -> Bool {
        arg.count >= 7 && equals(arg.prefix(7), "config=")
    }

    /// What a section header names.
    enum SectionKind { case group, service }

    /// Applies a configuration file: one setting per line as `name`, `name=value` or
    /// `name = value`; `#` starts a comment; blank lines are ignored. The global settings come
    /// first; a line `[group NAME]` or `[service NAME]` starts a section, which holds the same
    /// per-login settings and applies to members of group NAME (primary or supplementary) or to
    /// PAM service NAME; sections apply in file order, so a later one overrides an earlier one.
    /// Every line is checked, whether or not its section applies: a bad line anywhere is an
    /// error naming FILE:LINE. `store`, `socket`, `backend` and `postgresql` (one per process) are
    /// refused in sections.
    @_optimize(size)  // built small: a few short lines per login (docs/benchmarks.md)
    mutating func applyConfig(_ text: [UInt8], file: Message, service: [UInt8] = [],
                              isMember: (_ group: [UInt8]) throws(MFAError) -> Bool = { _ in false }) throws(MFAError) {
        var lineNumber: UInt64 = 0
        // nil: the global part; else whether the current section applies to this login.
        var section: (kind: SectionKind, matches: Bool, header: [UInt8])? = nil
        var scratch = ModuleOptions()  // where a section that does not apply is checked
        for rawLine in text.split(separator: ASCII.newline, omittingEmptySubsequences: false) {
            lineNumber += 1
            let at = file + ":" + Message(decimalBytes(lineNumber))
            var line = Array(rawLine)
            if let hash = line.firstIndex(of: 0x23) { line = Array(line[..<hash]) }
            line = trimmed(line)
            if line.isEmpty { continue }
            if line.first == 0x5B {  // '['
                let (kind, name) = try Self.sectionHeader(line, at: at)
                let matches: Bool
                switch kind {
                case .service: matches = name == service
                case .group: matches = try isMember(name)
                }
                section = (kind, matches, line + literal(" at ") + at.bytes)
                continue
            }
            if let eq = line.firstIndex(of: ASCII.equals) {
                line = trimmed(Array(line[..<eq])) + [ASCII.equals] + trimmed(Array(line[(eq + 1)...]))
            }
            if Self.isConfigArgument(line) {
                throw .invalidOption(at + ": config= is not allowed in the file")
            }
            let name = line.firstIndex(of: ASCII.equals).map { Array(line[..<$0]) } ?? line
            if let current = section {
                if equals(name, "store") || equals(name, "socket") || equals(name, "backend") || equals(name, "postgresql")
                    || equals(name, "postgresql_file") || equals(name, "db_connect_timeout") || equals(name, "db_idle_timeout")
                    || equals(name, "host_credential")
                    || Self.isDaemonDelivery(name) {
                    throw .invalidOption(at + ": " + printable(name) + " applies to the whole process and cannot be set in a section: "
                                         + printable(line))
                }
                if current.matches {
                    try apply(line, origin: at + ": ", fromFile: true)
                    if equals(name, "exempt") { exemptBy = exempt ? current.header : [] }
                    if equals(name, "nullok") && current.kind == .service { nullokFromServiceSection = true }
                    if let setting = PolicySetting(name: name) { sources.append(PolicySource(setting: setting, from: current.header)) }
                } else {
                    try scratch.apply(line, origin: at + ": ", fromFile: true)
                }
            } else {
                try apply(line, origin: at + ": ", fromFile: true)
                if equals(name, "exempt") { exemptBy = exempt ? at.bytes : [] }
                if let setting = PolicySetting(name: name) { sources.append(PolicySource(setting: setting, from: at.bytes)) }
            }
        }
    }

    /// `[group NAME]` or `[service NAME]` (spaces allowed inside the brackets): the kind and
    /// the name (1–256 printable ASCII bytes, no brackets).
    @_optimize(size)  // built small: a few short lines per login (docs/benchmarks.md)
    static func sectionHeader(_ line: [UInt8], at: Message) throws(MFAError) -> (SectionKind, [UInt8]) {
        func bad(_ why: Message) -> MFAError { .invalidOption(at + ": " + why + ": " + printable(line)) }
        guard line.count >= 2, line.last == 0x5D else { throw bad("a section header is [group NAME] or [service NAME]") }
        let inner = trimmed(Array(line[1..<(line.count - 1)]))
        guard let space = inner.firstIndex(where: { $0 == ASCII.space || $0 == ASCII.tab }) else {
            throw bad("a section header is [group NAME] or [service NAME]")
        }
        let kindBytes = Array(inner[..<space])
        let name = trimmed(Array(inner[space...]))
        let kind: SectionKind
        if equals(kindBytes, "group") { kind = .group } else if equals(kindBytes, "service") { kind = .service } else {
            throw bad("unknown section kind (group or service)")
        }
        guard !name.isEmpty, name.count <= maxSectionNameLength,
              !name.contains(where: { $0 <= 0x20 || $0 >= 0x7F || $0 == 0x5B || $0 == 0x5D }) else {
            throw bad("a section name is 1 to 256 printable characters without spaces or brackets")
        }
        // libpam lowercases the service name (pam_start): a capital could never match, and a
        // stricter section would be ignored without a word.
        if kind == .service, name.contains(where: { $0 >= 0x41 && $0 <= 0x5A }) {
            throw bad("libpam lowercases service names: write the service in lower case")
        }
        return (kind, name)
    }

    mutating func apply(_ arg: [UInt8], origin: Message, fromFile: Bool) throws(MFAError) {
        let eq = arg.firstIndex(of: ASCII.equals)
        let name = eq.map { Array(arg[..<$0]) } ?? arg
        let value = eq.map { Array(arg[($0 + 1)...]) }
        if try applyPolicy(name, value, arg: arg, origin: origin) { return }
        if try applyPlace(name, value, arg: arg, origin: origin, fromFile: fromFile) { return }
        throw Self.bad(arg, origin, "unknown or malformed setting")
    }

    /// An option's error: where it came from, why, and the option as given (printable).
    static func bad(_ arg: [UInt8], _ origin: Message, _ why: Message) -> MFAError {
        .invalidOption(origin + why + ": " + printable(arg))
    }

    /// The policy settings (what is asked, how strictly, of whom); false: not one of them.
    /// Compared with literals in place: no array is built per setting (this runs per login).
    @_optimize(size)  // built small: a few short lines per login (docs/benchmarks.md)
    private mutating func applyPolicy(_ name: [UInt8], _ value: [UInt8]?, arg: [UInt8], origin: Message) throws(MFAError) -> Bool {
        func bad(_ why: Message) -> MFAError { Self.bad(arg, origin, why) }
        if equals(name, "nullok") {
            guard let v = Self.flag(value) else { throw bad("nullok takes no value, or yes/no") }
            nullok = v
        } else if equals(name, "debug") {
            guard let v = Self.flag(value) else { throw bad("debug takes no value, or yes/no") }
            debug = v
        } else if equals(name, "adjacent_intervals") {
            adjacentIntervals = Int(try Self.number(value, 0...UInt64(TOTPVerifier.maxAdjacentIntervals), bad("adjacent_intervals must be 0 to 10")))
        } else if equals(name, "hotp_window") {
            let range = UInt64(HOTPWindow.sizeRange.lowerBound)...UInt64(HOTPWindow.sizeRange.upperBound)
            hotpWindow = Int(try Self.number(value, range, bad("hotp_window must be 1 to 100")))
        } else if equals(name, "hotp_resync_window") {
            let range = UInt64(HOTPWindow.resyncRange.lowerBound)...UInt64(HOTPWindow.resyncRange.upperBound)
            hotpResyncWindow = Int(try Self.number(value, range, bad("hotp_resync_window must be 0 to 1000")))
        } else if equals(name, "max_failures") {
            maxFailures = UInt32(try Self.number(value, Self.maxFailuresRange, bad("max_failures must be 1 to 100")))
        } else if equals(name, "lockout") {
            lockoutSeconds = Int64(try Self.number(value, Self.lockoutRange, bad("lockout must be 0 to 86400 seconds")))
        } else if equals(name, "forward_pass") {
            guard let v = Self.flag(value) else { throw bad("forward_pass takes no value, or yes/no") }
            forwardPass = v
        } else if equals(name, "enroll_at_login") {
            if let v = value, equals(v, "no") {
                enrollAtLoginUntil = nil
            } else {
                guard let v = value, let end = Self.endOfDay(v) else {
                    throw bad("enroll_at_login takes a last day, YYYY-MM-DD (UTC, 2000 to 2999), or no")
                }
                enrollAtLoginUntil = end
            }
        } else if equals(name, "factor_kinds") {
            guard let v = value, let kinds = Self.kinds(v) else {
                throw bad("factor_kinds is a list of totp, hotp, sms, email (at least one), separated by spaces or commas")
            }
            factorKinds = kinds
        } else if equals(name, "oob_digits") {
            oobDigits = Int(try Self.number(value, Self.oobDigitsRange, bad("oob_digits must be 6 to 8")))
        } else if equals(name, "oob_lifetime") {
            oobLifetime = Int64(try Self.number(value, Self.oobLifetimeRange, bad("oob_lifetime must be 30 to 3600 seconds")))
        } else if equals(name, "oob_max_attempts") {
            oobMaxAttempts = Int(try Self.number(value, Self.oobMaxAttemptsRange, bad("oob_max_attempts must be 1 to 10")))
        } else if equals(name, "oob_resend_interval") {
            oobResendInterval = Int64(try Self.number(value, Self.oobResendIntervalRange, bad("oob_resend_interval must be 0 to 3600 seconds")))
        } else if equals(name, "oob_max_per_hour") {
            oobMaxPerHour = Int(try Self.number(value, Self.oobMaxSendsRange, bad("oob_max_per_hour must be 1 to 32")))
        } else if equals(name, "oob_max_per_day") {
            oobMaxPerDay = Int(try Self.number(value, Self.oobMaxSendsRange, bad("oob_max_per_day must be 1 to 32")))
        } else if equals(name, "exempt") {
            guard let v = Self.flag(value) else { throw bad("exempt takes no value, or yes/no") }
            exempt = v
            exemptBy = v ? (origin.bytes.isEmpty ? literal("the pam.d line") : origin.bytes) : []
        } else {
            return false
        }
        return true
    }

    /// Where things are (store, socket, backend, database) and the prompt; false: not one of them.
    @_optimize(size)  // built small: a few short lines per login (docs/benchmarks.md)
    private mutating func applyPlace(_ name: [UInt8], _ value: [UInt8]?, arg: [UInt8], origin: Message,
                                     fromFile: Bool) throws(MFAError) -> Bool {
        func bad(_ why: Message) -> MFAError { Self.bad(arg, origin, why) }
        if equals(name, "store") {
            guard let v = value, v.first == 0x2F, v.count <= 1024, !v.contains(0) else {
                throw bad("store must be an absolute path")
            }
            store = v
        } else if equals(name, "prompt") {
            guard let v = value, !v.isEmpty, v.count <= 128, !v.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
                throw bad("prompt must be 1 to 128 printable characters")
            }
            customPrompt = v
        } else if equals(name, "socket") {
            guard let v = value, v.first == 0x2F, v.count <= Self.maxSocketPathLength, !v.contains(0) else {
                throw bad("socket must be an absolute path of at most 107 bytes")
            }
            socket = v
        } else if equals(name, "backend") {
            if let v = value, equals(v, "files") { backend = .files } else if let v = value, equals(v, "postgresql") {
                backend = .postgresql
            } else { throw bad("backend must be files or postgresql") }
        } else if equals(name, "postgresql") {
            // The value is never echoed: it may hold a password.
            guard fromFile else { throw .invalidOption(origin + "postgresql= is only allowed in the configuration file") }
            guard let v = value, !v.isEmpty, v.count <= Self.maxConninfoLength, !v.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
                throw .invalidOption(origin + "postgresql must be a libpq CONNINFO of 1 to 4096 printable bytes")
            }
            postgresql = v
        } else if Self.isDaemonDelivery(name) {
            guard fromFile else { throw .invalidOption(origin + printable(name) + "= is only allowed in the configuration file") }
            try applyDaemonSetting(name, value, arg: arg, origin: origin)
        } else if equals(name, "after_password") {
            // One line's role in a stack, not a policy: in the file it would apply to every line.
            guard !fromFile else { throw .invalidOption(origin + "after_password is only allowed on a pam.d line") }
            guard let v = Self.flag(value) else { throw bad("after_password takes no value, or yes/no") }
            afterPassword = v
        } else if equals(name, "code_after_password") {
            guard !fromFile else { throw .invalidOption(origin + "code_after_password is only allowed on a pam.d line") }
            guard let v = Self.flag(value) else { throw bad("code_after_password takes no value, or yes/no") }
            codeAfterPassword = v
        } else if equals(name, "db_connect_timeout") || equals(name, "db_idle_timeout") {
            guard fromFile else { throw .invalidOption(origin + printable(name) + "= is only allowed in the configuration file") }
            let connect = equals(name, "db_connect_timeout")
            guard let v = value, let n = parseDecimal(v, limit: 1_000_000), n >= 1, n <= (connect ? 120 : 86_400) else {
                throw bad(connect ? "db_connect_timeout must be 1 to 120 seconds" : "db_idle_timeout must be 1 to 86400 seconds")
            }
            if connect { dbConnectTimeout = Int(n) } else { dbIdleTimeout = Int(n) }
        } else if equals(name, "postgresql_file") || equals(name, "host_credential") {
            // Root-only files pam-totpd reads (a CONNINFO, the host's credential).
            guard fromFile else { throw .invalidOption(origin + printable(name) + "= is only allowed in the configuration file") }
            guard let v = value, v.first == 0x2F, v.count <= 1024, !v.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
                throw bad(printable(name) + " must be an absolute path")
            }
            if equals(name, "host_credential") { hostCredential = v } else { postgresqlFile = v }
        } else {
            return false
        }
        return true
    }

    /// pam-totpd's alone, and only from its file: how codes are sent and to whom, and who may ask
    /// about anyone. Checked here for shape (a path, printable text); pam-totpd checks the
    /// templates when it starts.
    @_optimize(size)  // cold: pam-totpd's settings
    private mutating func applyDaemonSetting(_ name: [UInt8], _ value: [UInt8]?, arg: [UInt8], origin: Message) throws(MFAError) {
        func bad(_ why: Message) -> MFAError { Self.bad(arg, origin, why) }
        guard let v = value, !v.isEmpty, v.count <= 512, !v.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
            throw bad("must be 1 to 512 printable bytes")
        }
        func count(_ limit: UInt64, _ why: Message) throws(MFAError) -> Int {
            guard let n = parseDecimal(v, limit: limit), n >= 1 else { throw bad(why) }
            return Int(n)
        }
        if equals(name, "sms_command") || equals(name, "email_command") {
            guard v.first == 0x2F else { throw bad("must be an absolute path") }
            if equals(name, "sms_command") { smsCommand = v } else { emailCommand = v }
        } else if equals(name, "sms_text") {
            smsText = v
        } else if equals(name, "email_subject") {
            emailSubject = v
        } else if equals(name, "email_text") {
            emailText = v
        } else if equals(name, "oob_destination_max_per_hour") {
            oobDestinationMaxPerHour = try count(1_000, "oob_destination_max_per_hour must be 1 to 1000")
        } else if equals(name, "oob_destination_max_per_day") {
            oobDestinationMaxPerDay = try count(10_000, "oob_destination_max_per_day must be 1 to 10000")
        } else if equals(name, "trusted_callers") {
            trustedCallers = try Self.accountNames(v, bad: bad("trusted_callers is a list of account names such as freerad"))
        } else if equals(name, "oob_allowed_prefixes") {
            oobAllowedPrefixes = try Self.prefixes(v, bad: bad("oob_allowed_prefixes is a list of E.164 country prefixes such as +1 +44"))
        } else {
            oobMaxPerMinute = try count(10_000, "oob_max_per_minute must be 1 to 10000")
        }
    }

    /// The Unix time at which the UTC day `YYYY-MM-DD` ends, for years 2000–2999; nil if malformed.
    static func endOfDay(_ text: [UInt8]) -> Int64? {
        guard text.count == 10, text[4] == 0x2D, text[7] == 0x2D,
              let y = parseDecimal(text[0..<4], limit: 2999), y >= 2000,
              let m = parseDecimal(text[5..<7], limit: 12), m >= 1,
              let d = parseDecimal(text[8..<10], limit: 31), d >= 1 else { return nil }
        let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
        let lengths: [UInt64] = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard d <= lengths[Int(m) - 1] else { return nil }
        // Days from 1970-01-01 to the given day (Howard Hinnant's days_from_civil).
        let yy = Int64(y) - (m <= 2 ? 1 : 0)
        let era = yy / 400
        let yoe = yy - era * 400
        let mp = (Int64(m) + 9) % 12
        let doy = (153 * mp + 2) / 5 + Int64(d) - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        return (days + 1) * 86_400
    }

    /// The UTC calendar day of a Unix time (Howard Hinnant's civil_from_days): no libc call, so
    /// the module imports no gmtime_r for it.
    public static func civilDay(_ unixTime: Int64) -> (year: Int64, month: Int64, day: Int64) {
        var days = unixTime / 86_400
        if unixTime % 86_400 < 0 { days -= 1 }
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day)
    }

    /// "2026-11-24 03:45:07 UTC": when a lockout ends, for log lines (no libc call).
    public static func utcText(_ unixTime: Int64) -> [UInt8] {
        guard unixTime >= 0, unixTime < 253_402_300_800 else { return literal("a time out of range") }  // years 1970-9999
        let (year, month, day) = civilDay(unixTime)
        let seconds = unixTime % 86_400
        // One buffer (a log line's, every wrong code): "YYYY-MM-DD hh:mm:ss UTC".
        var out: [UInt8] = []
        out.reserveCapacity(23)
        func two(_ v: Int64) {
            out.append(UInt8(truncatingIfNeeded: 48 + v / 10))
            out.append(UInt8(truncatingIfNeeded: 48 + v % 10))
        }
        two(year / 100); two(year % 100)  // 1970-9999: four digits
        out.append(0x2D); two(month); out.append(0x2D); two(day)
        out.append(0x20); two(seconds / 3600); out.append(0x3A); two(seconds / 60 % 60); out.append(0x3A); two(seconds % 60)
        out.append(literal: " UTC")
        return out
    }

    /// pam-totpd's delivery settings (file only, never in a section).
    static func isDaemonDelivery(_ name: [UInt8]) -> Bool {
        equals(name, "sms_command") || equals(name, "email_command") || equals(name, "sms_text") || equals(name, "email_subject")
            || equals(name, "email_text") || equals(name, "oob_max_per_minute") || equals(name, "oob_destination_max_per_hour")
            || equals(name, "oob_destination_max_per_day") || equals(name, "oob_allowed_prefixes") || equals(name, "trusted_callers")
    }

    /// `trusted_callers`: blank- or comma-separated account names (1 to 32 bytes of letters,
    /// digits, '.', '_' and '-', not starting with '-'), at most 16, never "root" (root needs none).
    static func accountNames(_ value: [UInt8], bad: MFAError) throws(MFAError) -> [[UInt8]] {
        var out: [[UInt8]] = []
        for word in value.split(whereSeparator: { $0 == ASCII.space || $0 == ASCII.tab || $0 == 0x2C }) {
            guard (1...32).contains(word.count), word.first != 0x2D, out.count < 16, !equals(Array(word), "root"),
                  word.allSatisfy({ ASCII.isDigit($0) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A)
                                    || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D }) else { throw bad }
            out.append(Array(word))
        }
        guard !out.isEmpty else { throw bad }
        return out
    }

    /// `oob_allowed_prefixes`: blank- or comma-separated "+" and 1 to 6 digits, the first not 0;
    /// at most 64 of them.
    static func prefixes(_ value: [UInt8], bad: MFAError) throws(MFAError) -> [[UInt8]] {
        var out: [[UInt8]] = []
        for word in value.split(whereSeparator: { $0 == ASCII.space || $0 == ASCII.tab || $0 == 0x2C }) {
            let digits = word.dropFirst()
            guard word.first == 0x2B, (1...6).contains(digits.count), let first = digits.first, first != ASCII.zero,
                  digits.allSatisfy(ASCII.isDigit), out.count < 64 else { throw bad }
            out.append(Array(word))
        }
        guard !out.isEmpty else { throw bad }
        return out
    }

    /// A decimal setting within `range`, else `error`.
    static func number(_ value: [UInt8]?, _ range: ClosedRange<UInt64>, _ error: MFAError) throws(MFAError) -> UInt64 {
        guard let v = value, let n = parseDecimal(v, limit: range.upperBound), range.contains(n) else { throw error }
        return n
    }

    /// `factor_kinds`' value: kind names separated by spaces or commas; nil if empty or unknown.
    static func kinds(_ value: [UInt8]) -> UInt8? {
        var bits: UInt8 = 0
        for word in value.split(whereSeparator: { $0 == ASCII.space || $0 == 0x2C || $0 == ASCII.tab }) {
            guard let kind = FactorKind(name: word) else { return nil }
            bits |= kind.bit
        }
        return bits == 0 ? nil : bits
    }

    /// The names of the kinds in `bits`, space-separated ("totp sms").
    public static func kindNames(_ bits: UInt8) -> [UInt8] {
        var out: [UInt8] = []
        for kind in FactorKind.all where bits & kind.bit != 0 {
            if !out.isEmpty { out.append(ASCII.space) }
            out.append(contentsOf: bytes(kind.name))
        }
        return out
    }

    /// A flag: bare name, `=yes` or `=no`.
    static func flag(_ value: [UInt8]?) -> Bool? {
        guard let value else { return true }
        if equals(value, "yes") { return true }
        if equals(value, "no") { return false }
        return nil
    }

    /// Reads the configuration file safely: regular file, owned by root, not writable by group
    /// or other, at most 64 KiB. A missing file is nil unless it was named explicitly.
    @_optimize(size)  // built small: a few short lines per login (docs/benchmarks.md)
    static func readConfigFile(_ path: [UInt8], required: Bool) throws(MFAError) -> [UInt8]? {
        let fd: Int32
        do throws(MFAError) {
            fd = try withCPath(path) { (p) throws(MFAError) -> Int32 in
                try retryingOnEINTR("open config") { clibc_open(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0) }
            }
        } catch {
            if case .system(_, let e) = error, e == .noSuchFileOrDirectory, !required { return nil }
            if case .system(_, let e) = error, e == .permissionDenied {
                // A caller without root (a screen locker) reads it too: a 0600 file (a database
                // password in it) denied every such login with a bare errno.
                throw .invalidOption("cannot read " + printable(path) + " (permission denied): every caller's pam_totp reads it, "
                                     + "a screen locker as the user, so it must be readable by all (0644); keep a database password "
                                     + "out of it: postgresql_file = a root-only file, passfile= or a client certificate")
            }
            throw .invalidOption("cannot open " + printable(path) + describeErrno(error))
        }
        let file = OwnedFD<LiveSystemCalls>(fd)
        let st = try FileStatus(LiveSystemCalls.self, fd: file.raw)
        guard st.isRegular else { throw .invalidOption(printable(path) + " is not a regular file") }
        guard st.owner == 0 || st.owner == clibc_geteuid() else {
            throw .invalidOption(printable(path) + " must be owned by root")
        }
        guard st.mode & 0o022 == 0 else { throw .invalidOption(printable(path) + " must not be writable by group or other") }
        do throws(MFAError) {
            return try readBounded(LiveSystemCalls.self, file.raw, limit: maxConfigSize,
                                   expected: st.size > Int64(maxConfigSize) ? maxConfigSize + 1 : Int(st.size))
        } catch {
            throw .invalidOption(printable(path) + " is too large or unreadable")
        }
    }
}

/// The settings where the site's file and a pam.d line meet by strictness (ARCHITECTURE rule 16:
/// site policy cannot be silently defeated): no nullok over nullok, not exempt over exempt, the
/// narrower windows, the fewer failures before a lockout, the longer lockout.
public enum PolicySetting: Equatable, Sendable {
    case nullok, exempt, adjacentIntervals, hotpWindow, hotpResyncWindow, maxFailures, lockout
    case factorKinds, oobDigits, oobLifetime, oobMaxAttempts, oobResendInterval, oobMaxPerHour, oobMaxPerDay

    public static var all: [PolicySetting] {
        [.nullok, .exempt, .adjacentIntervals, .hotpWindow, .hotpResyncWindow, .maxFailures, .lockout,
         .factorKinds, .oobDigits, .oobLifetime, .oobMaxAttempts, .oobResendInterval, .oobMaxPerHour, .oobMaxPerDay]
    }

    public init?(name: [UInt8]) {
        if equals(name, "nullok") { self = .nullok } else if equals(name, "exempt") { self = .exempt }
        else if equals(name, "adjacent_intervals") { self = .adjacentIntervals } else if equals(name, "hotp_window") { self = .hotpWindow }
        else if equals(name, "hotp_resync_window") { self = .hotpResyncWindow }
        else if equals(name, "max_failures") { self = .maxFailures }
        else if equals(name, "lockout") { self = .lockout } else if equals(name, "factor_kinds") { self = .factorKinds }
        else if equals(name, "oob_digits") { self = .oobDigits } else if equals(name, "oob_lifetime") { self = .oobLifetime }
        else if equals(name, "oob_max_attempts") { self = .oobMaxAttempts }
        else if equals(name, "oob_resend_interval") { self = .oobResendInterval }
        else if equals(name, "oob_max_per_hour") { self = .oobMaxPerHour } else if equals(name, "oob_max_per_day") { self = .oobMaxPerDay }
        else { return nil }
    }

    public var name: Message {
        switch self {
        case .nullok: return "nullok"
        case .exempt: return "exempt"
        case .adjacentIntervals: return "adjacent_intervals"
        case .hotpWindow: return "hotp_window"
        case .hotpResyncWindow: return "hotp_resync_window"
        case .maxFailures: return "max_failures"
        case .lockout: return "lockout"
        case .factorKinds: return "factor_kinds"
        case .oobDigits: return "oob_digits"
        case .oobLifetime: return "oob_lifetime"
        case .oobMaxAttempts: return "oob_max_attempts"
        case .oobResendInterval: return "oob_resend_interval"
        case .oobMaxPerHour: return "oob_max_per_hour"
        case .oobMaxPerDay: return "oob_max_per_day"
        }
    }
}

public struct PolicySource: Equatable, Sendable {
    public var setting: PolicySetting
    /// "FILE:LINE", "[group NAME] at FILE:LINE", "the pam.d line", ...
    public var from: [UInt8]
}
