import CPAM
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem

/// The one table from an outcome to a PAM return code (pam_totp(8), RETURN VALUES). Every error
/// denies: only `nullok` for an unenrolled user and `exempt` give PAM_IGNORE, decided before
/// the prompt in pam_sm_authenticate (`ignored`, `exempted`); a first-login enrolment returns
/// its own code (EnrolAtLogin.swift: PAM_SUCCESS only for a verified, saved factor).
func pamCode(_ outcome: AuthOutcome) -> Int32 {
    switch outcome {
    case .success, .recoveryCode: return PAM_SUCCESS
    case .wrongCode: return PAM_AUTH_ERR
    case .resyncNeeded: return PAM_AUTH_ERR  // a resync left unfinished (the conversation failed)
    case .notRecorded: return PAM_AUTH_ERR  // exactly a wrong code: an unrecordable attempt is no oracle
    case .lockedOut: return PAM_AUTH_ERR   // same as a wrong code: the caller learns nothing more
    case .unenrolled: return PAM_AUTH_ERR  // same as a wrong code: no account enumeration
    case .failed(let error):
        switch error {
        case .invalidOption: return PAM_SERVICE_ERR
        case .invalidBase32, .invalidParameters, .refused, .invalidLabel, .corruptRecord: return PAM_AUTHINFO_UNAVAIL
        case .insecureStore, .system, .lockTimeout: return PAM_AUTHINFO_UNAVAIL
        case .invalidUserName: return PAM_AUTH_ERR
        case .clockOutOfRange: return PAM_AUTH_ERR
        case .malformed, .daemon, .unconfirmed: return PAM_AUTHINFO_UNAVAIL
        }
    }
}

/// "+3", "-2", "0".
func signed(_ value: Int64) -> Message { Message(signedDecimal(value)) }
