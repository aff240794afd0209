import CLibc
import CPAM
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem

// Decoding what libpam hands us, defensively: every C string is read with a bound.

let maxArgumentLength = 4096
let maxAnswerLength = 1024
let maxArguments = 64

/// argv as byte arrays. A NULL entry or absurd argc becomes an argument that fails parsing.
func arguments(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> [[UInt8]] {
    guard argc > 0, let argv else { return [] }
    guard argc <= maxArguments else { return [literal("(too many arguments)")] }
    var out: [[UInt8]] = []
    for i in 0..<Int(argc) {
        guard let p = argv[i] else { out.append(literal("(null argument)")); continue }
        out.append(bytes(p, max: maxArgumentLength) ?? literal("(overlong argument)"))
    }
    return out
}

/// The bytes of a C string, or nil if it is longer than `max`.
func bytes(_ p: UnsafePointer<CChar>, max: Int) -> [UInt8]? {
    let n = strnlen(p, max + 1)
    if n > max { return nil }
    return p.withMemoryRebound(to: UInt8.self, capacity: n) { Array(UnsafeBufferPointer(start: $0, count: n)) }
}

/// The account named `user` in NSS (canonical name and uid), nil if there is none. A failed
/// look-up throws: it must deny, never read as "no such account" (which nullok would let through).
func lookupAccount(_ user: [UInt8]) throws(MFAError) -> Account? {
    try nssLookup(user, "getpwnam_r") { name, buffer, size -> (Int32, Account?) in
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>? = nil
        let rc = getpwnam_r(name, &entry, buffer, size, &result)
        guard rc == 0, result != nil, let pwName = entry.pw_name, let canonical = bytes(pwName, max: maxArgumentLength) else {
            return (rc, nil)
        }
        return (rc, Account(name: canonical, uid: UInt32(entry.pw_uid)))
    }
}

/// One NSS `*_r` look-up of `name`, with a buffer that grows on ERANGE up to 1 MiB (not zeroed:
/// the call fills what it uses). `call` gets the NUL-terminated name, the buffer and its size,
/// and returns the call's result and what it found (nil: no such entry). A failed look-up
/// throws: it must deny, never read as "no such entry".
func nssLookup<R>(_ name: [UInt8], _ operation: Message,
                  _ call: (UnsafePointer<CChar>, UnsafeMutablePointer<CChar>, Int) -> (Int32, R?)) throws(MFAError) -> R? {
    var cName = name
    cName.append(0)
    var size = 4096
    while size <= 1 << 20 {
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
        defer { buffer.deallocate() }
        let (rc, found) = cName.withUnsafeBufferPointer { n -> (Int32, R?) in
            guard let base = n.baseAddress else { return (EINVAL, nil) }
            return base.withMemoryRebound(to: CChar.self, capacity: n.count) { call($0, buffer, size) }
        }
        if rc == ERANGE { size *= 4; continue }
        guard rc == 0 else { throw .system(operation: operation, errno: Errno(rc)) }
        return found
    }
    throw .system(operation: operation, errno: .outOfRange)
}

func userName(_ pamh: OpaquePointer) -> [UInt8]? {
    var user: UnsafePointer<CChar>? = nil
    guard pam_get_user(pamh, &user, nil) == PAM_SUCCESS, let user else { return nil }
    guard let name = bytes(user, max: maxArgumentLength), !name.isEmpty else { return nil }
    return name
}

/// Asks one hidden question. The reply is copied (at most maxAnswerLength bytes; a longer one
/// becomes an answer that cannot match), then wiped and freed.
func prompt(_ pamh: OpaquePointer, _ text: Message) -> [UInt8]? {
    var reply: UnsafeMutablePointer<CChar>? = nil
    let status = withCString(text) { cpam_prompt(pamh, PAM_PROMPT_ECHO_OFF, &reply, $0) }
    guard status == PAM_SUCCESS, let reply else {
        if let reply { free(reply) }
        return nil
    }
    // An overlong reply becomes the empty answer, which never matches; all of it is wiped.
    let answer = bytes(UnsafePointer(reply), max: maxAnswerLength) ?? []
    clibc_wipe(reply, strlen(reply))
    free(reply)
    return answer
}

func log(_ pamh: OpaquePointer, _ priority: Int32, _ message: Message) {
    _ = withCString(message) { cpam_syslog(pamh, priority, $0); return 0 }
}

/// A log line built in one buffer and handed to pam_syslog with its NUL, without a copy: the
/// lines of a success and of a wrong code are written on every login (one allocation instead
/// of one per piece).
struct LogLine {
    private var bytes: [UInt8] = []

    init() { bytes.reserveCapacity(192) }

    mutating func add(_ s: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    /// A user name or label as `printable` shows it.
    mutating func add(printable b: [UInt8]) {
        for c in b.prefix(128) { bytes.append(c >= 0x20 && c < 0x7F ? c : 0x3F) }
        if b.count > 128 { add("...") }
    }

    mutating func add(message m: Message) { for c in m.bytes { bytes.append(c == 0 ? 0x3F : c) } }

    mutating func add(decimal v: UInt64) { bytes += decimalBytes(v) }

    mutating func send(_ pamh: OpaquePointer, _ priority: Int32) {
        bytes.append(0)
        bytes.withUnsafeBufferPointer { buf in
            buf.withMemoryRebound(to: CChar.self) { b in
                if let base = b.baseAddress { cpam_syslog(pamh, priority, base) }
            }
        }
    }
}

/// Calls `body` with `s` as a C string (NUL bytes inside become '?').
func withCString(_ s: Message, _ body: (UnsafePointer<CChar>) -> Int32) -> Int32 {
    var z: [UInt8] = []
    z.reserveCapacity(s.bytes.count + 1)  // one allocation, the NUL included
    for c in s.bytes { z.append(c == 0 ? 0x3F : c) }
    z.append(0)
    return z.withUnsafeBufferPointer { buf in
        buf.withMemoryRebound(to: CChar.self) { b in
            // A buffer from a non-empty array always has a base address.
            guard let base = b.baseAddress else { return PAM_BUF_ERR }  // never: z holds the NUL
            return body(base)
        }
    }
}

/// The PAM service name (for pam-totpd's log line), empty if unset.
func serviceName(_ pamh: OpaquePointer) -> [UInt8] {
    var item: UnsafeRawPointer? = nil
    guard pam_get_item(pamh, PAM_SERVICE, &item) == PAM_SUCCESS, let item else { return [] }
    return bytes(item.assumingMemoryBound(to: CChar.self), max: 255) ?? []
}
