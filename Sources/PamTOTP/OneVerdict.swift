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
// nothing, so the next line asks and decides on its own. Never reused: with forward_pass (that
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
    guard key.withUnsafeBufferPointer({ cpam_verdict_matches(pamh, $0.baseAddress, $0.count, verdictReuseMilliseconds) }) == 1 else {
        return false
    }
    log(pamh, LOG_INFO, "user " + printable(user) + ": a code was accepted earlier in this PAM transaction; not asked again")
    return true
}

/// After an accepted code: the verdict for later lines of this pam_authenticate.
@inline(never)
func rememberVerified(_ pamh: OpaquePointer, _ line: UnsafeRawPointer?, key: [UInt8]) {
    _ = key.withUnsafeBufferPointer { cpam_verdict_keep(pamh, line, $0.baseAddress, $0.count) }
}

/// pam_setcred: the application is done with this authentication; a later one on the same
/// handle asks again.
@inline(never)
func forgetVerified(_ pamh: OpaquePointer) {
    cpam_verdict_forget(pamh)
}
