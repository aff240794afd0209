import CPAM
import MFACore

/// The one table from an outcome to a PAM return code (README, "Error mapping"). Every error
/// denies: only `nullok` for an unenrolled user and `exempt` give PAM_IGNORE, decided before
/// the prompt in pam_sm_authenticate (`ignored`, `exempted`); a first-login enrolment returns
/// its own code (EnrolAtLogin.swift: PAM_SUCCESS only for a verified, saved factor).
func pamCode(_ outcome: AuthOutcome) -> Int32 {
    switch outcome {
    case .success, .recoveryCode: return PAM_SUCCESS
    case .wrongCode: return PAM_AUTH_ERR
    case .notRecorded: return PAM_AUTH_ERR  // exactly a wrong code: an unrecordable attempt is no oracle
    case .lockedOut: return PAM_AUTH_ERR   // same as a wrong code: the caller learns nothing more
    case .unenrolled: return PAM_AUTH_ERR  // same as a wrong code: no account enumeration
    case .failed(let error):
        switch error {
        case .invalidOption: return PAM_SERVICE_ERR
        case .invalidBase32, .invalidParameters, .invalidLabel, .corruptRecord: return PAM_AUTHINFO_UNAVAIL
        case .insecureStore, .system, .lockTimeout: return PAM_AUTHINFO_UNAVAIL
        case .invalidUserName: return PAM_AUTH_ERR
        case .clockOutOfRange: return PAM_AUTH_ERR
        case .malformed, .daemon: return PAM_AUTHINFO_UNAVAIL
        }
    }
}

/// A log-safe description of an error: never a secret, a code or record contents.
func describe(_ error: MFAError) -> Message {
    switch error {
    case .invalidOption(let what): return "configuration error: " + what
    case .invalidBase32: return "record holds invalid Base32"
    case .invalidParameters(let what): return "invalid parameters: " + what
    case .invalidUserName: return "user name cannot be enrolled"
    case .invalidLabel: return "invalid factor label"
    case .insecureStore(let what): return "insecure store: " + what
    case .corruptRecord(let what): return "corrupt record: " + what
    case .system(let operation, let errno): return operation + " failed (errno " + decimal(errno) + ")"
    case .lockTimeout: return "timed out waiting for the record lock"
    case .clockOutOfRange: return "system clock out of range"
    case .malformed(let what): return "malformed message from pam-totpd: " + what
    case .daemon(let what): return "pam-totpd: " + what
    }
}

/// "+3", "-2", "0".
func signed(_ value: Int64) -> Message { Message(signedDecimal(value)) }
