import CLibc
import CPAM
import MFACore

// Decoding what libpam hands us, defensively: every C string is read with a bound.

let maxArgumentLength = 4096
let maxAnswerLength = 1024
let maxArguments = 64

/// argv as byte arrays. A NULL entry or absurd argc becomes an argument that fails parsing.
func arguments(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> [[UInt8]] {
    guard argc > 0, let argv else { return [] }
    guard argc <= maxArguments else { return [Array("(too many arguments)".utf8)] }
    var out: [[UInt8]] = []
    for i in 0..<Int(argc) {
        guard let p = argv[i] else { out.append(Array("(null argument)".utf8)); continue }
        out.append(bytes(p, max: maxArgumentLength) ?? Array("(overlong argument)".utf8))
    }
    return out
}

/// The bytes of a C string, or nil if it is longer than `max`.
func bytes(_ p: UnsafePointer<CChar>, max: Int) -> [UInt8]? {
    let n = strnlen(p, max + 1)
    if n > max { return nil }
    return p.withMemoryRebound(to: UInt8.self, capacity: n) { Array(UnsafeBufferPointer(start: $0, count: n)) }
}

/// The uid of the account named `user` (through libpam's NSS helper, which caches it in the
/// handle for other modules), or nil if there is none.
func accountUID(_ pamh: OpaquePointer, _ user: [UInt8]) -> UInt32? {
    var z = user
    z.append(0)
    return z.withUnsafeBufferPointer { buf -> UInt32? in
        guard let base = buf.baseAddress else { return nil }
        return base.withMemoryRebound(to: CChar.self, capacity: buf.count) { name -> UInt32? in
            guard let pw = pam_modutil_getpwnam(pamh, name) else { return nil }
            return UInt32(pw.pointee.pw_uid)
        }
    }
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
    let n = strnlen(reply, maxAnswerLength + 1)
    // An overlong reply becomes the empty answer, which never matches.
    let answer = bytes(UnsafePointer(reply), max: maxAnswerLength) ?? []
    clibc_wipe(reply, n)
    free(reply)
    return answer
}

func log(_ pamh: OpaquePointer, _ priority: Int32, _ message: Message) {
    _ = withCString(message) { cpam_syslog(pamh, priority, $0); return 0 }
}

/// Calls `body` with `s` as a C string (NUL bytes inside become '?').
func withCString(_ s: Message, _ body: (UnsafePointer<CChar>) -> Int32) -> Int32 {
    var z = s.bytes
    for i in 0..<z.count where z[i] == 0 { z[i] = 0x3F }
    z.append(0)
    return z.withUnsafeBufferPointer { buf in
        buf.withMemoryRebound(to: CChar.self) { b in
            // A buffer from a non-empty array always has a base address.
            guard let base = b.baseAddress else { return PAM_BUF_ERR }  // never: z holds the NUL
            return body(base)
        }
    }
}
