import MFASystem

/// A PAM service's stack of one type (`auth`) as libpam reads it, for `totp-enroll policy` and
/// `totp-enroll check` (docs/ARCHITECTURE.md, section 5.6): comments stripped, lines joined at a
/// trailing backslash, `@include FILE` and `include`/`substack` controls followed in place, `-auth`
/// lines kept (marked quiet), a bracketed control (`[success=1 default=ignore]`) taken whole with
/// its blanks, and a bracketed argument (`[a b]`) as one argument without its brackets. A missing
/// service file falls back to `other`, as libpam does.
///
/// The files are an administrator's text, so nothing here may trap: every read is bounded
/// (`maxFileSize` a file, `maxFiles` reads, `maxEntries` lines kept, `maxProblems` problems, includes
/// at most `maxDepth` deep, which also stops a file that includes itself), no index is unchecked, and whatever
/// cannot be followed is reported as a `Problem` naming FILE:LINE instead. The files are read
/// through `reader`, so tests and the fuzz target (`pamstack`) need no file system.
public struct PamStack: Equatable, Sendable {
    public static let maxDepth = 16
    public static let maxFileSize = 256 * 1024
    /// Far above any distribution's stacks (Debian's largest follow a handful of files and keep
    /// a few dozen lines), low enough that a loop of includes costs little.
    public static let maxFiles = 64
    public static let maxEntries = 1024
    static let atIncludeControl = literal("@include")
    /// Problems kept for one stack: a file included many times would repeat its own.
    public static let maxProblems = 256

    /// One line of the stack: a module, or an include whose lines follow it in `entries`.
    public struct Entry: Equatable, Sendable {
        public enum Kind: Equatable, Sendable {
            /// `auth CONTROL MODULE ARGS...`
            case module
            /// `auth include NAME` (lines of this type), `auth substack NAME` (the same, with
            /// its own `done`/`die`), `@include NAME` (every type; only this type is kept).
            case include, substack, atInclude
        }
        public var kind: Kind
        /// The file as read (`DIR/NAME`, or the absolute name an include gave).
        public var file: [UInt8]
        /// 1-based: the line where the entry starts (a continued line keeps its first line).
        public var line: Int
        /// `-auth`: libpam does not log a module it cannot load.
        public var quiet: Bool
        /// As written, blanks inside brackets collapsed to one space: `required`,
        /// `[success=1 default=ignore]`; `include`/`substack`/`@include` for includes.
        public var control: [UInt8]
        /// The module path as written; for an include, the name included.
        public var module: [UInt8]
        public var arguments: [[UInt8]]
        /// 0: the service's own file; each include one deeper.
        public var depth: Int
        /// Read through a `substack` somewhere above it.
        public var inSubstack: Bool

        /// The module's file name without its directory (`pam_totp.so`).
        public var moduleName: [UInt8] {
            guard let slash = module.lastIndex(of: 0x2F) else { return module }
            return Array(module[module.index(after: slash)...])
        }

        /// "FILE:LINE".
        public var place: [UInt8] { file + [0x3A] + decimalBytes(UInt64(line)) }
    }

    /// Something that could not be followed or read.
    public struct Problem: Equatable, Sendable {
        public var file: [UInt8]
        public var line: Int
        public var message: [UInt8]
        /// "FILE:LINE: MESSAGE" (FILE: MESSAGE for a whole file).
        public var text: [UInt8] {
            file + (line > 0 ? [0x3A] + decimalBytes(UInt64(line)) : []) + literal(": ") + message
        }
    }

    public var service: [UInt8]
    /// The service file that was read: DIR/SERVICE, or DIR/other when there is none.
    public var file: [UInt8]
    /// No DIR/SERVICE: libpam uses DIR/other.
    public var usedOther: Bool
    public var entries: [Entry]
    public var problems: [Problem]

    /// The module lines whose module file is `name` (`pam_totp.so`), in stack order.
    public func modules(named name: [UInt8]) -> [Entry] {
        entries.filter { $0.kind == .module && $0.moduleName == name }
    }

    /// Reads SERVICE's stack of `type` from `directory`. `reader(path)` returns a file's bytes
    /// (nil: it cannot be read); more than `maxFileSize` bytes is refused as too large.
    public static func read(service: [UInt8], directory: [UInt8], type: [UInt8] = literal("auth"),
                            reader: @escaping (_ path: [UInt8]) -> [UInt8]?) -> PamStack {
        var stack = PamStack(service: service, file: [], usedOther: false, entries: [], problems: [])
        var walk = Walk(directory: directory, type: lowercased(type), reader: reader)
        guard isServiceName(service) else {
            stack.problems.append(Problem(file: service, line: 0, message: literal("not a PAM service name")))
            return stack
        }
        var path = walk.path(of: service)
        var text = walk.load(path)
        if text == .missing {
            path = walk.path(of: literal("other"))
            text = walk.load(path)
            stack.usedOther = true
        }
        stack.file = path
        switch text {
        case .lines(let lines): walk.parse(lines, file: path, depth: 0, substack: false)
        case .missing: walk.report(Problem(file: path, line: 0, message: literal("cannot be read")))
        case .tooLarge: walk.report(Problem(file: path, line: 0, message: literal("is larger than 256 KiB: not read")))
        case .limit: break
        }
        stack.entries = walk.entries
        stack.problems = walk.problems
        return stack
    }

    /// A service name libpam would look up: not empty, no '/', not "." or "..", printable.
    public static func isServiceName(_ name: [UInt8]) -> Bool {
        guard !name.isEmpty, name.count <= 255, !name.contains(0x2F), !equals(name, "."), !equals(name, "..") else { return false }
        return !name.contains(where: { $0 <= 0x20 || $0 == 0x7F })
    }

    /// The words of one logical line (comment already removed), split at blanks; a word that
    /// starts with '[' runs to the next unescaped ']' (`\]` is a literal ']'). `bracketed`
    /// tells which words were bracketed. At most 1,024 words.
    static func words(_ line: [UInt8]) -> [(word: [UInt8], bracketed: Bool)] {
        var out: [(word: [UInt8], bracketed: Bool)] = []
        var i = line.startIndex
        while i < line.endIndex, out.count < 1024 {
            let c = line[i]
            if isBlank(c) { i += 1; continue }
            var word: [UInt8] = []
            if c == 0x5B {  // '['
                i += 1
                var closed = false
                while i < line.endIndex {
                    let d = line[i]
                    if d == 0x5C, i + 1 < line.endIndex, line[i + 1] == 0x5D { word.append(0x5D); i += 2; continue }
                    if d == 0x5D { closed = true; i += 1; break }
                    word.append(d)
                    i += 1
                }
                // An unclosed bracket keeps its '[' so the caller can tell.
                out.append((closed ? word : [0x5B] + word, closed))
                continue
            }
            while i < line.endIndex, !isBlank(line[i]) { word.append(line[i]); i += 1 }
            out.append((word, false))
        }
        return out
    }

    static func isBlank(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 || c == 0x0D || c == 0x0B || c == 0x0C }

    static func lowercased(_ b: [UInt8]) -> [UInt8] { b.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 } }

    /// Blanks inside a bracketed control collapsed to single spaces.
    static func collapsed(_ b: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        for c in b {
            if isBlank(c) {
                if let last = out.last, last != 0x20 { out.append(0x20) }
            } else {
                out.append(c)
            }
        }
        if out.last == 0x20 { out.removeLast() }
        return out
    }

    /// One logical line per element: a line ending in a backslash (blanks after it allowed) is
    /// joined to the next (the element keeps the first line's number); `#` to the end of the
    /// line is a comment, as libpam reads it.
    static func logicalLines(_ text: [UInt8]) -> [(number: Int, text: [UInt8])] {
        var out: [(number: Int, text: [UInt8])] = []
        var current: [UInt8] = []
        var start = 0
        var continuing = false
        var number = 0
        for raw in text.split(separator: 0x0A, omittingEmptySubsequences: false) {
            number += 1
            var line = Array(raw)
            if let hash = line.firstIndex(of: 0x23) { line.removeSubrange(hash...) }
            // As libpam: blanks after the backslash do not stop it continuing the line.
            while let last = line.last, PamStack.isBlank(last) { line.removeLast() }
            if !continuing { start = number; current = [] }
            if line.last == 0x5C {  // a trailing backslash: continued
                line.removeLast()
                current += line
                current.append(0x20)
                continuing = true
                continue
            }
            current += line
            continuing = false
            out.append((start, current))
        }
        if continuing { out.append((start, current)) }
        return out
    }

    /// One logical line of a file, classified once for the walk's type: a file included many
    /// times (the loops `maxDepth` and `maxEntries` stop) is split into words once, and each
    /// visit only appends what was found.
    enum Line: Equatable {
        /// A blank line, a comment, or a line of another type.
        case skip
        case atInclude(name: [UInt8])
        case include(control: [UInt8], name: [UInt8], quiet: Bool, substack: Bool)
        case module(control: [UInt8], module: [UInt8], arguments: [[UInt8]], quiet: Bool)
        case problem(message: [UInt8])
    }

    struct NumberedLine: Equatable {
        var number: Int
        var line: Line
    }

    enum Loaded: Equatable { case lines([NumberedLine]), missing, tooLarge, limit }

    /// A file's logical lines classified for `type`.
    static func classify(_ text: [UInt8], type: [UInt8]) -> [NumberedLine] {
        PamStack.logicalLines(text).map { NumberedLine(number: $0.number, line: classify(line: $0.text, type: type)) }
    }

    static func classify(line: [UInt8], type: [UInt8]) -> Line {
        let words = PamStack.words(line)
        guard let first = words.first else { return .skip }
        if equals(first.word, "@include") && !first.bracketed {
            guard words.count >= 2, let name = words.dropFirst().first?.word, !name.isEmpty else {
                return .problem(message: literal("@include without a file name"))
            }
            return .atInclude(name: name)
        }
        var typeWord = PamStack.lowercased(first.word)
        var quiet = false
        if typeWord.first == 0x2D { quiet = true; typeWord.removeFirst() }
        guard typeWord == type else { return .skip }
        let rest = words.dropFirst()
        if let c = rest.first, !c.bracketed, c.word.first == 0x5B {
            return .problem(message: literal("a control whose '[' is not closed"))
        }
        // The module is a plain word (libpam takes a bracketed one for no module at all).
        guard let controlWord = rest.first, controlWord.bracketed || !controlWord.word.isEmpty,
              let moduleWord = rest.dropFirst().first, !moduleWord.bracketed, !moduleWord.word.isEmpty else {
            return .problem(message: literal("an incomplete line (a type, a control and a module are needed)"))
        }
        let controlLower = PamStack.lowercased(controlWord.word)
        if !controlWord.bracketed && (equals(controlLower, "include") || equals(controlLower, "substack")) {
            return .include(control: controlLower, name: moduleWord.word, quiet: quiet, substack: equals(controlLower, "substack"))
        }
        let control = controlWord.bracketed ? [0x5B] + PamStack.collapsed(controlWord.word) + [0x5D] : controlWord.word
        return .module(control: control, module: moduleWord.word, arguments: words.dropFirst(3).map { $0.word }, quiet: quiet)
    }

    /// The walk over the files: bounded reads, entries and problems in stack order.
    struct Walk {
        let directory: [UInt8]
        let type: [UInt8]
        let reader: (_ path: [UInt8]) -> [UInt8]?
        var entries: [Entry] = []
        var problems: [Problem] = []
        var reads = 0
        var limitReported = false
        /// Each file as first read: a later include of it counts as a read but reads nothing.
        var cache: [[UInt8]: Loaded] = [:]

        init(directory: [UInt8], type: [UInt8], reader: @escaping (_ path: [UInt8]) -> [UInt8]?) {
            (self.directory, self.type, self.reader) = (directory, type, reader)
        }

        func path(of name: [UInt8]) -> [UInt8] {
            if name.first == 0x2F { return name }
            var p = directory
            if p.last != 0x2F { p.append(0x2F) }
            return p + name
        }

        /// Keeps a problem while fewer than `maxProblems` are kept; then says once that the rest are not.
        mutating func report(_ problem: Problem) {
            report(file: problem.file, line: problem.line) { problem.message }
        }

        /// As `report(_:)`, the message made only if it is kept (a loop repeats its problems).
        mutating func report(file: [UInt8], line: Int, _ message: () -> [UInt8]) {
            if problems.count < PamStack.maxProblems - 1 {
                problems.append(Problem(file: file, line: line, message: message()))
            } else if problems.count == PamStack.maxProblems - 1 {
                problems.append(Problem(file: file, line: line, message: literal("more than 255 problems in one stack: the rest are not listed")))
            }
        }

        mutating func load(_ path: [UInt8]) -> Loaded {
            guard reads < PamStack.maxFiles else {
                if !limitReported {
                    limitReported = true
                    report(Problem(file: path, line: 0, message: literal("more than 64 files read for one stack: the rest is not followed")))
                }
                return .limit
            }
            reads += 1
            if let known = cache[path] { return known }
            let loaded: Loaded
            if let bytes = reader(path) {
                loaded = bytes.count <= PamStack.maxFileSize ? .lines(PamStack.classify(bytes, type: type)) : .tooLarge
            } else {
                loaded = .missing
            }
            cache[path] = loaded
            return loaded
        }

        mutating func parse(_ lines: [NumberedLine], file: [UInt8], depth: Int, substack: Bool) {
            for numbered in lines {
                let number = numbered.number
                guard entries.count < PamStack.maxEntries else {
                    if !limitReported {
                        limitReported = true
                        report(Problem(file: file, line: number, message: literal("more than 1024 lines in one stack: the rest is not read")))
                    }
                    return
                }
                switch numbered.line {
                case .skip: continue
                case .problem(let message): report(Problem(file: file, line: number, message: message))
                case .atInclude(let name):
                    follow(name, kind: .atInclude, control: PamStack.atIncludeControl, quiet: false, file: file, line: number,
                           depth: depth, substack: substack, into: substack)
                case .include(let control, let name, let quiet, let isSub):
                    follow(name, kind: isSub ? .substack : .include, control: control, quiet: quiet, file: file, line: number,
                           depth: depth, substack: substack, into: substack || isSub)
                case .module(let control, let module, let arguments, let quiet):
                    entries.append(Entry(kind: .module, file: file, line: number, quiet: quiet, control: control, module: module,
                                         arguments: arguments, depth: depth, inSubstack: substack))
                }
            }
        }

        mutating func follow(_ name: [UInt8], kind: Entry.Kind, control: [UInt8], quiet: Bool, file: [UInt8], line: Int,
                             depth: Int, substack: Bool, into: Bool) {
            entries.append(Entry(kind: kind, file: file, line: line, quiet: quiet, control: control, module: name, arguments: [],
                                 depth: depth, inSubstack: substack))
            guard depth + 1 <= PamStack.maxDepth else {
                report(file: file, line: line) { literal("includes nested more than 16 deep (a loop?): ") + printableBytes(name) + literal(" is not followed") }
                return
            }
            let path = self.path(of: name)
            switch load(path) {
            case .lines(let lines): parse(lines, file: path, depth: depth + 1, substack: into)
            case .missing:
                report(file: file, line: line) { printableBytes(path) + literal(" cannot be read") }
            case .tooLarge:
                report(file: file, line: line) { printableBytes(path) + literal(" is larger than 256 KiB: not read") }
            case .limit: break
            }
        }
    }

    /// Bytes shown in a message: printable ASCII kept, anything else as '?'.
    static func printableBytes(_ b: [UInt8]) -> [UInt8] {
        b.prefix(256).map { $0 >= 0x20 && $0 < 0x7F ? $0 : 0x3F }
    }
}
