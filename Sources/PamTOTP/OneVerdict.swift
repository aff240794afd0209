import CLibc
import CPAM
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem

// One code per PAM transaction. With the pam-auth-update profile enabled (pam_totp in
// common-auth), a service stack that also names pam_totp.so asked for a code twice, and the
// same code typed twice failed as a replay. A line that accepted a code leaves its verdict in the
// PAM handle (pam_set_data; the block and its cleanup are cpam_verdict_* in CPAM/shim.h); a later
// line of the same pam_authenticate, for the same backend, store, socket, service and user,
// returns PAM_SUCCESS without asking. What is left holds no code and no secret.
//
// Only an accepted code is reused: a failure, PAM_IGNORE (nullok, exempt) or an error leaves
// nothing, so the next line asks and decides on its own. (A forward_pass line's word to the
// `after_password` line of a one-prompt stack, OutOfBand.swift, is left the same way, as
// another kind, which no line takes for an accepted code.) Never reused: with forward_pass (that
// line must hand the password on); in a later pam_authenticate on the same handle (every line
// notes itself first thing, and a line that finds itself already noted drops what was left: a
// screen locker that keeps its handle is asked each time, pam_setcred or not); after pam_setcred;
// after `verdictReuseMilliseconds`.

let verdictReuseMilliseconds: Int64 = 30_000

// @inline(never): the cpam_verdict_* C functions then stay in this file's object. An object
// holding C functions gets unwind tables (.eh_frame) for all its functions, and inlined into
// Module.swift they cost the module 1.5 KB.

/// First thing in every pam_sm_authenticate: notes this line (its argv, which libpam keeps for
/// the life of the handle); a line that ran already means that a new pam_authenticate began.
@inline(never)
func noteLine(_ pamh: OpaquePointer, _ line: UnsafeRawPointer?) {
    cpam_verdict_line(pamh, line)
}

/// What a verdict is for: the backend, then the store, the daemon's socket, the PAM service and
/// the user, separated by NULs (none of them can hold one), so equal keys mean equal fields.
/// Made once per pam_sm_authenticate, in one allocation.
func verdictKey(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions) -> [UInt8] {
    let service = serviceName(pamh)
    var key: [UInt8] = []
    key.reserveCapacity(4 + options.store.count + options.socket.count + service.count + user.count)
    key.append(options.backend == .postgresql ? 0x70 : 0x66)
    key.append(contentsOf: options.store)
    key.append(0)
    key.append(contentsOf: options.socket)
    key.append(0)
    key.append(contentsOf: service)
    key.append(0)
    key.append(contentsOf: user)
    return key
}

/// Whether a line before this one in the same pam_authenticate accepted a code for the same
/// key, within `verdictReuseMilliseconds`: then this line returns PAM_SUCCESS unasked.
@inline(never)
func verifiedEarlier(_ pamh: OpaquePointer, key: [UInt8], user: [UInt8], options: ModuleOptions) -> Bool {
    guard !options.forwardPass else { return false }
    guard verdictLeft(pamh, key: key) == CPAM_VERDICT_CODE else { return false }
    log(pamh, LOG_INFO, "user " + printable(user) + ": a code was accepted earlier in this PAM transaction; not asked again")
    return true
}

/// What a line before this one in the same pam_authenticate left for the same key, within
/// `verdictReuseMilliseconds`: CPAM_VERDICT_CODE (a code was accepted), CPAM_VERDICT_SEND,
/// CPAM_VERDICT_IGNORED (a forward_pass line's word to its after_password line), 0 for nothing.
@inline(never)
func verdictLeft(_ pamh: OpaquePointer, key: [UInt8]) -> Int32 {
    key.withUnsafeBufferPointer { cpam_verdict_kind(pamh, $0.baseAddress, $0.count, verdictReuseMilliseconds) }
}

/// After an accepted code (`kind` CPAM_VERDICT_CODE): the verdict for later lines of this
/// pam_authenticate. A forward_pass line leaves its after_password line CPAM_VERDICT_SEND or
/// CPAM_VERDICT_IGNORED the same way (never taken for an accepted code).
@inline(never)
func rememberVerified(_ pamh: OpaquePointer, _ line: UnsafeRawPointer?, key: [UInt8], kind: Int32 = CPAM_VERDICT_CODE) {
    _ = key.withUnsafeBufferPointer { cpam_verdict_keep(pamh, line, $0.baseAddress, $0.count, kind) }
}

/// pam_setcred: the application is done with this authentication; a later one on the same
/// handle asks again.
@inline(never)
func forgetVerified(_ pamh: OpaquePointer) {
    cpam_verdict_forget(pamh)
}
