import CLibc

// The command lines of totp-enroll and pam-totpd: subcommands, options, flags and positional
// arguments, their --help, and one "Error: " line with the usage for a mistake. Small on
// purpose: a general argument parser pulled Foundation into both programs, about 8 MB each
// (docs/ARCHITECTURE.md, section 3). Never built into the module.

/// One option, flag or positional argument of a command, as parsed and as --help shows it.
public struct ArgumentSpec: Sendable {
    public enum Kind: Sendable { case option, repeatedOption, flag, positional }
    /// `--user` for options and flags; the value's name (`label`, `FILE`) for a positional.
    public let name: String
    /// The value's name shown in help: `--user <NAME>`.
    public let value: String
    public let kind: Kind
    public let help: String
    /// An option that must be given, or a positional that must be there.
    public let required: Bool

    /// `--name VALUE`, given once (the last one given counts).
    public static func option(_ name: String, _ value: String, _ help: String, required: Bool = false) -> ArgumentSpec {
        ArgumentSpec(name: name, value: value, kind: .option, help: help, required: required)
    }
    /// `--name VALUE`, any number of times.
    public static func repeated(_ name: String, _ value: String, _ help: String) -> ArgumentSpec {
        ArgumentSpec(name: name, value: value, kind: .repeatedOption, help: help, required: false)
    }
    /// `--name`, no value.
    public static func flag(_ name: String, _ help: String) -> ArgumentSpec {
        ArgumentSpec(name: name, value: "", kind: .flag, help: help, required: false)
    }
    /// A positional argument, in the order given.
    public static func argument(_ value: String, _ help: String, required: Bool = true) -> ArgumentSpec {
        ArgumentSpec(name: value, value: value, kind: .positional, help: help, required: required)
    }

    /// `--user <NAME>`, `--json`, `<label>`.
    var synopsis: String {
        switch kind {
        case .option, .repeatedOption: return name + " <" + value + ">"
        case .flag: return name
        case .positional: return "<" + value + ">"
        }
    }
}

/// How a command fails, one type for every command so that `Program.main` handles each case
/// without casting errors (which Embedded Swift, the programs' build, cannot do).
public enum CommandError: Error, CustomStringConvertible {
    /// A mistake on the command line (values that do not go together): "Error: " and this
    /// text, the usage line, exit 64.
    case usage(String)
    /// Leave with this status and nothing more printed.
    case exit(Int32)
    /// "Error: " and this text, exit 1.
    case failure(String)

    public var description: String {
        switch self {
        case .usage(let text): return text
        case .exit(let status): return "exit status \(status)"
        case .failure(let text): return text
        }
    }
}

/// A command's arguments, parsed against its specs.
public struct Arguments {
    private var values: [String: [String]] = [:]
    private var flags: Set<String> = []
    private var positionals: [String: String] = [:]

    public init(_ arguments: [String], specs: [ArgumentSpec]) throws(CommandError) {
        var byName: [String: ArgumentSpec] = [:]
        for spec in specs where spec.kind != .positional { byName[spec.name] = spec }
        let positionalSpecs = specs.filter { $0.kind == .positional }
        var given: [String] = []
        var i = 0
        var onlyPositionals = false
        while i < arguments.count {
            let a = arguments[i]
            i += 1
            if onlyPositionals || a == "-" || !a.hasPrefix("-") {
                given.append(a)
                continue
            }
            if a == "--" { onlyPositionals = true; continue }
            var name = a
            var inline: String? = nil
            if let eq = a.firstIndex(of: "=") {
                name = String(a[..<eq])
                inline = String(a[a.index(after: eq)...])
            }
            guard let spec = byName[name] else { throw .usage("Unknown option '\(name)'") }
            switch spec.kind {
            case .flag:
                guard inline == nil else { throw .usage("'\(name)' takes no value") }
                flags.insert(name)
            case .option, .repeatedOption:
                let value: String
                if let inline {
                    value = inline
                } else {
                    guard i < arguments.count, !arguments[i].hasPrefix("--") else {
                        throw .usage("Missing value for '\(spec.synopsis)'")
                    }
                    value = arguments[i]
                    i += 1
                }
                if spec.kind == .option { values[name] = [value] } else { values[name, default: []].append(value) }
            case .positional:
                break
            }
        }
        guard given.count <= positionalSpecs.count else {
            throw .usage("Unexpected argument '\(given[positionalSpecs.count])'")
        }
        for (n, spec) in positionalSpecs.enumerated() {
            if n < given.count { positionals[spec.name] = given[n] } else if spec.required {
                throw .usage("Missing expected argument '\(spec.synopsis)'")
            }
        }
        for spec in specs where spec.required && spec.kind == .option && values[spec.name] == nil {
            throw .usage("Missing expected argument '\(spec.synopsis)'")
        }
    }

    /// True when `-h` or `--help` stands where an option may (not as an option's value, not
    /// after `--`): `remove --code -h LABEL` is a code, not a request for help.
    public static func asksForHelp(_ arguments: [String], specs: [ArgumentSpec]) -> Bool {
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            i += 1
            if a == "--" { return false }
            if a == "-h" || a == "--help" { return true }
            if a.hasPrefix("--"), !a.contains("="),
               let spec = specs.first(where: { $0.name == a }), spec.kind == .option || spec.kind == .repeatedOption {
                i += 1  // its value
            }
        }
        return false
    }

    /// The value of `--name` (the last given), nil if not given.
    public func string(_ name: String) -> String? { values[name]?.last }
    /// Every value of a repeated option, in order.
    public func strings(_ name: String) -> [String] { values[name] ?? [] }
    public func flag(_ name: String) -> Bool { flags.contains(name) }
    /// A positional argument by its value name, nil if not given.
    public func argument(_ name: String) -> String? { positionals[name] }

    /// A required option or positional (the parse already refused its absence).
    public func required(_ name: String) throws(CommandError) -> String {
        guard let v = values[name]?.last ?? positionals[name] else { throw .usage("Missing expected argument '\(name)'") }
        return v
    }

    /// The value of `--name` as a decimal integer of type T, nil if not given.
    public func integer<T: FixedWidthInteger>(_ name: String, _ type: T.Type = T.self) throws(CommandError) -> T? {
        guard let text = string(name) else { return nil }
        guard let v = T(text, radix: 10) else { throw .usage("The value '\(text)' is invalid for '\(name)': a whole number") }
        return v
    }

    /// The value of `--name`, one of `choices`, nil if not given.
    public func choice(_ name: String, _ choices: [String]) throws(CommandError) -> String? {
        guard let text = string(name) else { return nil }
        guard choices.contains(text) else {
            throw .usage("The value '\(text)' is invalid for '\(name)': one of \(choices.joined(separator: ", "))")
        }
        return text
    }
}

/// A subcommand (or a program without subcommands): its name, help and arguments, and what
/// it does. Both programs are Embedded Swift, so errors are typed: one type, `CommandError`.
public protocol Command: SendableMetatype {
    static var name: String { get }
    static var abstract: String { get }
    static var discussion: String { get }
    static var specs: [ArgumentSpec] { get }
    /// Reads the parsed arguments; a usage error for values that do not go together.
    init(_ arguments: Arguments) throws(CommandError)
    func run() throws(CommandError)
}

extension Command {
    public static var discussion: String { "" }
}

/// A command as the program keeps it: its help and how to run it on parsed arguments.
public struct Subcommand: Sendable {
    public let name: String
    public let abstract: String
    public let discussion: String
    public let specs: [ArgumentSpec]
    let run: @Sendable (Arguments) throws(CommandError) -> Void

    public init<C: Command>(_ command: C.Type) {
        name = C.name
        abstract = C.abstract
        discussion = C.discussion
        specs = C.specs
        run = { (arguments: Arguments) throws(CommandError) in try C(arguments).run() }
    }
}

/// A program: its subcommands, the one run without a subcommand name, and its help.
public struct Program: Sendable {
    public let name: String
    public let abstract: String
    public let discussion: String
    /// What runs without a subcommand name: the program's own command (`pam-totpd`), or a
    /// default subcommand (`totp-enroll` runs `enroll`).
    public let root: Subcommand
    public let rootIsSubcommand: Bool
    public let subcommands: [Subcommand]
    /// Options (each with a value) that every subcommand takes and that may also be given
    /// before the subcommand's name: `totp-enroll --config F list` is `totp-enroll list --config F`.
    public let optionsBeforeSubcommand: [String]

    public init(name: String, abstract: String, discussion: String = "", root: Subcommand, rootIsSubcommand: Bool,
                subcommands: [Subcommand], optionsBeforeSubcommand: [String] = []) {
        self.name = name
        self.abstract = abstract
        self.discussion = discussion
        self.root = root
        self.rootIsSubcommand = rootIsSubcommand
        self.subcommands = subcommands
        self.optionsBeforeSubcommand = optionsBeforeSubcommand
    }

    /// `arguments` with the `optionsBeforeSubcommand` (and their values) that come before a
    /// subcommand's name moved after it; anything else is left as typed.
    func movingOptionsAfterSubcommand(_ arguments: [String]) -> [String] {
        var moved: [String] = []
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            if optionsBeforeSubcommand.contains(a), i + 1 < arguments.count {
                moved += [a, arguments[i + 1]]
                i += 2
            } else if optionsBeforeSubcommand.contains(where: { a.hasPrefix($0 + "=") }) {
                moved.append(a)
                i += 1
            } else {
                break
            }
        }
        guard !moved.isEmpty, i < arguments.count, subcommand(named: arguments[i]) != nil else { return arguments }
        return [arguments[i]] + moved + arguments[(i + 1)...]
    }

    func subcommand(named name: String) -> Subcommand? { subcommands.first { $0.name == name } }

    /// The program's own command (not a default subcommand, which has a name of its own).
    func isRoot(_ command: Subcommand) -> Bool { !rootIsSubcommand && command.name == root.name }

    /// Parses `arguments` (without the program's name), runs the command, and exits: 0, 1 after
    /// "Error: " and what failed, 64 after a usage error, or the status of `CommandError.exit`.
    public func main(_ arguments: [String]) -> Never {
        var command = root
        var rest = movingOptionsAfterSubcommand(arguments)
        var path = name
        if let first = rest.first {
            if first == "--version", rest.count == 1 {
                print(name + " " + packageVersion)
                exit(0)
            }
            if first == "help" {
                print(rest.count > 1 ? (subcommand(named: rest[1]).map { help($0) } ?? topHelp()) : topHelp(), terminator: "")
                exit(0)
            }
            if let sub = subcommand(named: first) {
                command = sub
                rest.removeFirst()
                path = name + " " + sub.name
            }
        }
        let isTop = path == name
        if Arguments.asksForHelp(rest, specs: command.specs) {
            print(isTop ? topHelp() : help(command), terminator: "")
            exit(0)
        }
        let failure: CommandError
        do throws(CommandError) {
            let parsed: Arguments
            parsed = try Arguments(rest, specs: command.specs)
            try command.run(parsed)
            exit(0)
        } catch {
            failure = error
        }
        switch failure {
        case .usage(let text):
            printToStandardError("Error: \(text)\nUsage: \(usageLine(command, path: path))\n  See '\(path) --help' for more information.\n")
            exit(64)
        case .exit(let status):
            exit(status)
        case .failure(let text):
            printToStandardError("Error: \(text)\n")
            exit(1)
        }
    }

    func usageLine(_ command: Subcommand, path: String) -> String {
        var parts = [path]
        for spec in command.specs where spec.kind == .positional {
            parts.append(spec.required ? spec.synopsis : "[" + spec.synopsis + "]")
        }
        for spec in command.specs where spec.kind != .positional {
            let s = spec.kind == .repeatedOption ? spec.synopsis + " ..." : spec.synopsis
            parts.append(spec.required ? s : "[" + s + "]")
        }
        if isRoot(command) && !subcommands.isEmpty { parts.append("[<subcommand>]") }
        return parts.joined(separator: " ")
    }

    /// `PROGRAM SUBCOMMAND --help`.
    public func help(_ command: Subcommand) -> String {
        let path = isRoot(command) ? name : name + " " + command.name
        var text = wrapped("OVERVIEW: " + command.abstract, indent: 0) + "\n\n"
        if !command.discussion.isEmpty { text += wrapped(command.discussion, indent: 0) + "\n\n" }
        text += "USAGE: " + usageLine(command, path: path) + "\n\n"
        let positionals = command.specs.filter { $0.kind == .positional }
        if !positionals.isEmpty {
            text += "ARGUMENTS:\n" + positionals.map { entry($0.synopsis, $0.help) }.joined() + "\n"
        }
        text += "OPTIONS:\n"
        text += command.specs.filter { $0.kind != .positional }.map { entry($0.synopsis, $0.help) }.joined()
        text += entry("-h, --help", "Show help information.")
        if isRoot(command) && !subcommands.isEmpty { text += subcommandList(defaultName: nil) }
        return text
    }

    /// `PROGRAM --help`: the subcommands (for totp-enroll, with the default's options).
    public func topHelp() -> String {
        guard rootIsSubcommand else { return help(root) }
        var text = wrapped("OVERVIEW: " + abstract, indent: 0) + "\n\n"
        if !discussion.isEmpty { text += wrapped(discussion, indent: 0) + "\n\n" }
        text += "USAGE: " + name + " <subcommand>\n"
        text += subcommandList(defaultName: root.name)
        text += "\n  See '\(name) help <subcommand>' for detailed help; '\(name) --version' for the release.\n"
        return text
    }

    func subcommandList(defaultName: String?) -> String {
        "\nSUBCOMMANDS:\n" + subcommands.map { entry($0.name == defaultName ? $0.name + " (default)" : $0.name, $0.abstract) }.joined()
    }

    /// One help entry: the name in a column, the text wrapped beside it.
    func entry(_ name: String, _ help: String) -> String {
        let column = 30
        let head = "  " + name
        let body = wrapped(help, indent: column)
        if head.count + 2 <= column {
            return head + String(repeating: " ", count: column - head.count) + body.drop { $0 == " " } + "\n"
        }
        return head + "\n" + body + "\n"
    }

    /// `text` wrapped at 80 columns, each line indented by `indent` spaces.
    func wrapped(_ text: String, indent: Int) -> String {
        var lines: [String] = []
        for paragraph in text.split(separator: "\n", omittingEmptySubsequences: false) {
            var line = ""
            for word in paragraph.split(separator: " ") {
                if !line.isEmpty && indent + line.count + 1 + word.count > 80 {
                    lines.append(String(repeating: " ", count: indent) + line)
                    line = ""
                }
                line += (line.isEmpty ? "" : " ") + word
            }
            lines.append(String(repeating: " ", count: indent) + line)
        }
        return lines.joined(separator: "\n")
    }
}

/// Writes `text` to standard error as it is (no buffering behind standard output's).
public func printToStandardError(_ text: String) {
    fflush(nil)
    var bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress.map { $0 + offset }, $0.count - offset) }
        if n < 0 && clibc_errno() == EINTR { continue }
        guard n > 0 else { return }
        offset += n
    }
}

/// This process's arguments, argv[0] first. Embedded Swift (both programs' build) has no
/// `CommandLine`, and SwiftPM owns an executable target's C `main`, so they are read from
/// /proc/self/cmdline: NUL-separated, as the kernel keeps them. Exits with status 1 and one line
/// if they cannot be read (no /proc) or are over 1 MiB.
public func processArguments() -> [[UInt8]] {
    let limit = 1 << 20
    let fd = clibc_open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC, 0)
    var bytes: [UInt8] = []
    var ok = fd >= 0
    if ok {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while bytes.count <= limit {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && clibc_errno() == EINTR { continue }
            if n <= 0 { ok = n == 0; break }
            bytes += buffer[0..<n]
        }
        close(fd)
    }
    guard ok else {
        printToStandardError("Error: cannot read this program's arguments from /proc/self/cmdline\n")
        exit(1)
    }
    guard bytes.count <= limit else {
        printToStandardError("Error: the arguments are too long (over 1 MiB in all)\n")
        exit(64)
    }
    var out: [[UInt8]] = [[]]
    for b in bytes {
        if b == 0 { out.append([]) } else { out[out.count - 1].append(b) }
    }
    if out.last?.isEmpty == true { out.removeLast() }
    return out
}
