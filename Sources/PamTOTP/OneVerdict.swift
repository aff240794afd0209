import CLibc
import CPAM
import MFACore

// One code per PAM transaction. With the pam-auth-update profile enabled (pam_totp in
// common-auth), a service stack that also names pam_totp.so asked for a code twice, and the
// same code typed twice failed as a replay. A line that accepted a code leaves its verdict in
// the PAM handle (pam_set_data); a later line of the same transaction, for the same user and
// the same store, returns PAM_SUCCESS without asking. What is left holds no code and no
// secret: the time, the store and the user. It is not reused with forward_pass (that line must
// hand the password on), after pam_setcred (an application that keeps one handle for several
// authentications, a screen locker, is asked again), nor after `verdictReuseSeconds`.

// Computed, not stored: a global array would be allocated on every load of the module and
// never freed (libpam dlopens and dlcloses it around every login; LeakTests).
var verdictDataName: Message { "pam_totp_verified" }
let verdictReuseSeconds: Int64 = 30

/// What a line leaves: 16 hex digits of the monotonic clock's seconds, then the store (the
/// backend, the store directory and the daemon's socket) and the user, each after a newline.
func verdictValue(user: [UInt8], options: ModuleOptions, at seconds: Int64) -> [UInt8] {
    var value = [UInt8](repeating: 0x30, count: 16)
    var x = UInt64(bitPattern: seconds)
    var i = 15
    while i >= 0 {
        let d = UInt8(truncatingIfNeeded: x & 15)
        value[i] = d < 10 ? 0x30 + d : 0x57 + d
        x >>= 4
        i -= 1
    }
    value.append(0x0A)
    value.append(options.backend == .postgresql ? 0x70 : 0x66)  // 'p' or 'f'
    value += options.store
    value.append(0x0A)
    value += options.socket
    value.append(0x0A)
    value += user
    return value
}

/// Whether a line before this one in the same transaction accepted a code of `user` from the
/// same store, within `verdictReuseSeconds`: then this line returns PAM_SUCCESS unasked.
func verifiedEarlier(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions) -> Bool {
    guard !options.forwardPass else { return false }
    var found: [UInt8] = []
    _ = withCString(verdictDataName) { name in
        guard let value = cpam_get_string_data(pamh, name) else { return 0 }
        found = Array(UnsafeBufferPointer(start: UnsafeRawPointer(value).assumingMemoryBound(to: UInt8.self), count: strlen(value)))
        return 0
    }
    let now = clibc_monotonic_ms() / 1000
    let expected = verdictValue(user: user, options: options, at: 0)
    guard found.count == expected.count, found.count > 16 else { return false }
    var at: Int64 = 0
    var same = true
    for i in 0..<found.count {
        if i < 16 {
            let c = found[i]
            let d: Int64 = c >= 0x30 && c <= 0x39 ? Int64(c - 0x30) : (c >= 0x61 && c <= 0x66 ? Int64(c - 0x57) : -1)
            if d < 0 { same = false } else { at = (at << 4) | d }
        } else if found[i] != expected[i] {
            same = false
        }
    }
    guard same, now >= at, now - at <= verdictReuseSeconds else { return false }
    log(pamh, LOG_INFO, "user " + printable(user) + ": a code was accepted earlier in this PAM transaction; not asked again")
    return true
}

/// After an accepted code: the verdict for later lines of this transaction.
func rememberVerified(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions) {
    let value = Message(verdictValue(user: user, options: options, at: clibc_monotonic_ms() / 1000))
    _ = withCString(verdictDataName) { name in withCString(value) { cpam_set_string_data(pamh, name, $0) } }
}

/// pam_setcred: the application is done with this authentication; a later one on the same
/// handle asks again.
func forgetVerified(_ pamh: OpaquePointer) {
    _ = withCString(verdictDataName) { cpam_clear_data(pamh, $0) }
}
