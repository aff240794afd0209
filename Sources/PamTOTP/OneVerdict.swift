import CLibc
import CPAM
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem

// One login, one verdict (docs/ARCHITECTURE.md, section 4, rule 20). An admin's stack often names the
// module twice: the pam-auth-update profile's `pam_totp.so nullok` in common-auth and a service's
// own `auth required pam_totp.so` line, identical or not. Within one pam_authenticate, the first
// line that asks the user (or denies them) decides for that user, store and service: it leaves
// its PAM code in the handle (pam_set_data; the block is cpam_verdict_* in CPAM/shim.h), and
// every later line for the same user, store and service prompts for nothing, counts nothing,
// logs no acceptance, spends no code, and returns that code: a failure always (it can only
// deny); a success when the later line is of the same strength (factor kinds, window, token
// windows, failures, lockout, exempt: a stricter line asks for its own code, so an app code the
// profile's line took never passes a line that allows only what it allows).
//
// PAM_IGNORE binds no later line: an un-enrolled user under nullok or an exempt user gets it,
// asked (forward_pass) or not, and the next line decides by its own nullok and exempt (a strict
// line after the profile's nullok line still denies an un-enrolled user; `totp-enroll check`
// reports such a stack). Which pam_authenticate a verdict belongs to is marked in
// PAM_OLDAUTHTOK, which libpam clears before and after every pam_authenticate (shim.h): a
// screen locker that keeps its handle is asked again at its next pam_authenticate.
//
// A one-prompt stack's forward_pass line leaves its code the same way for the `after_password`
// line after the password module (OutOfBand.swift): PAM_CRED_INSUFFICIENT there means "send a
// code after the password".

/// What a line's own run came to: nothing asked (PAM_IGNORE, the next line decides), or a
/// decision that binds the later lines of this pam_authenticate.
enum LineDecision {
    case notAsked
    case decided(Int32)
    /// code_after_password: the line kept the code it split off the answer for the
    /// after_password line, with its own PAM code (not to be kept again).
    case deferred(Int32)
}

// @inline(never): the cpam_* C functions then stay in this file's object. An object holding C
// functions gets unwind tables (.eh_frame) for all its functions, and inlined into Module.swift
// they cost the module 1.5 KB.

/// First thing in every pam_sm_authenticate: marks this pam_authenticate, or finds it marked by
/// an earlier line (then its verdict, if any, stands).
@inline(never)
func beginPass(_ pamh: OpaquePointer) {
    _ = cpam_pass_begin(pamh)
}

/// What a verdict is for, made once per pam_sm_authenticate in one allocation: the base — the
/// backend, the store, the daemon's socket, the PAM service and the user, separated by NULs (none
/// of them can hold one), so equal bases mean equal fields — then a NUL and the line's strength
/// (factor kinds, window, token windows, failures, lockout, exempt): a success binds only a
/// later line of the same strength. Returns the key and the base's length.
func verdictKey(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions) -> (key: [UInt8], base: Int) {
    let service = serviceName(pamh)
    var key: [UInt8] = []
    key.reserveCapacity(64 + options.store.count + options.socket.count + service.count + user.count)
    key.append(options.backend == .postgresql ? 0x70 : 0x66)
    key.append(contentsOf: options.store)
    key.append(0)
    key.append(contentsOf: options.socket)
    key.append(0)
    key.append(contentsOf: service)
    key.append(0)
    key.append(contentsOf: user)
    let base = key.count
    key.append(0)
    // Fixed-width bytes, appended in place (no array per number: this runs on every login).
    func add(_ n: UInt64) { withUnsafeBytes(of: n.littleEndian) { key.append(contentsOf: $0) } }
    key.append(options.factorKinds)
    key.append(options.exempt ? 1 : 0)
    add(UInt64(clamping: options.adjacentIntervals))
    add(UInt64(clamping: options.hotpWindow))
    add(UInt64(clamping: options.hotpResyncWindow))
    add(UInt64(options.maxFailures))
    add(UInt64(clamping: options.lockoutSeconds))
    return (key, base)
}

/// The PAM code an earlier line of this pam_authenticate returned that binds this line (a
/// failure for the same base, a success for the same base and strength; `any`: whatever was left
/// for the base, for the after_password line); nil for none.
@inline(never)
func verdictLeft(_ pamh: OpaquePointer, key: (key: [UInt8], base: Int), any: Bool = false) -> Int32? {
    let code = key.key.withUnsafeBufferPointer { cpam_verdict_code(pamh, $0.baseAddress, $0.count, key.base, any ? 1 : 0) }
    return code < 0 ? nil : code
}

/// The deciding line's code, for the later lines of this pam_authenticate; `deferred`: the code
/// a code_after_password line split off the answer, for the after_password line to check.
@inline(never)
func rememberVerdict(_ pamh: OpaquePointer, key: (key: [UInt8], base: Int), code: Int32, deferred: ArraySlice<UInt8>? = nil) -> Bool {
    key.key.withUnsafeBufferPointer { k in
        (deferred ?? []).withUnsafeBufferPointer { d in
            cpam_verdict_keep(pamh, k.baseAddress, k.count, code, d.baseAddress, d.count, deferred == nil ? 0 : 1) == PAM_SUCCESS
        }
    }
}

/// Whether a code_after_password line of this pam_authenticate left a code for this user, store
/// and service (no copy of it is made).
@inline(never)
func hasDeferredCode(_ pamh: OpaquePointer, key: (key: [UInt8], base: Int)) -> Bool {
    key.key.withUnsafeBufferPointer { cpam_verdict_deferred(pamh, $0.baseAddress, $0.count, key.base, nil) } >= 0
}

/// The code a code_after_password line of this pam_authenticate left for this user, store and
/// service; nil for none. The caller wipes it.
@inline(never)
func deferredCode(_ pamh: OpaquePointer, key: (key: [UInt8], base: Int)) -> [UInt8]? {
    var out = [UInt8](repeating: 0, count: Int(CPAM_DEFERRED_MAX))
    let n = key.key.withUnsafeBufferPointer { k in
        out.withUnsafeMutableBufferPointer { cpam_verdict_deferred(pamh, k.baseAddress, k.count, key.base, $0.baseAddress) }
    }
    guard n >= 0, Int(n) <= out.count else { wipe(&out); return nil }
    out.removeSubrange(Int(n)...)  // the tail is zeros (an empty answer: no code at all)
    return out
}


/// A later line: the earlier line's code, unasked. Only with `debug` is it logged: the
/// deciding line logged the outcome once.
@inline(never)
func earlierVerdict(_ pamh: OpaquePointer, _ code: Int32, user: [UInt8], options: ModuleOptions) -> Int32 {
    if options.debug {
        log(pamh, LOG_DEBUG, "user " + printable(user) + ": an earlier pam_totp line of this authentication decided (PAM code "
            + decimal(UInt64(UInt32(bitPattern: code))) + "); not asked again")
    }
    return code
}

/// pam_setcred: the application is done with this authentication.
@inline(never)
func forgetVerdict(_ pamh: OpaquePointer) {
    cpam_verdict_forget(pamh)
}
