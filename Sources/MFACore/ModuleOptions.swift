/// The module's arguments from a pam.d line (DESIGN.md §5). Parsing is strict: an unknown
/// argument, a duplicate-free but malformed value, or an out-of-range number throws
/// `invalidOption` naming the argument, and the module denies (never silently ignores).
public struct ModuleOptions: Equatable, Sendable {
    public var adjacentIntervals: Int = TOTPVerifier.defaultAdjacentIntervals
    public var nullok = false
    public var store: [UInt8] = Store.defaultDirectory
    public var debug = false

    public init() {}

    public static func parse(_ arguments: [[UInt8]]) throws(MFAError) -> ModuleOptions {
        var o = ModuleOptions()
        for arg in arguments {
            let eq = arg.firstIndex(of: ASCII.equals)
            let name = eq.map { Array(arg[..<$0]) } ?? arg
            let value = eq.map { Array(arg[($0 + 1)...]) }
            switch (name, value) {
            case (Array("nullok".utf8), nil): o.nullok = true
            case (Array("debug".utf8), nil): o.debug = true
            case (Array("adjacent_intervals".utf8), let v?):
                guard let n = parseDecimal(v, limit: UInt64(TOTPVerifier.maxAdjacentIntervals)) else {
                    throw .invalidOption("adjacent_intervals must be 0 to 10: " + printable(arg))
                }
                o.adjacentIntervals = Int(n)
            case (Array("store".utf8), let v?):
                guard v.first == 0x2F, v.count <= 1024 else {
                    throw .invalidOption("store must be an absolute path: " + printable(arg))
                }
                o.store = v
            default:
                throw .invalidOption("unknown or malformed argument: " + printable(arg))
            }
        }
        return o
    }
}

/// Text safe to put in a log line: printable ASCII kept, everything else as '?', at most 128
/// bytes. For user names and arguments, never for secrets (those are never logged at all).
public func printable(_ bytes: [UInt8]) -> Message {
    var out: [UInt8] = []
    for c in bytes.prefix(128) { out.append(c >= 0x20 && c < 0x7F ? c : 0x3F) }
    if bytes.count > 128 { out += [0x2E, 0x2E, 0x2E] }
    return Message(out)
}
