/// A request refused for a reason the caller can act on, by name (issue 37): the same refusal
/// from the file store, from the fleet database (SQLSTATE `PT` + its three-digit number, raised
/// by sql/api.sql) and across the wire to totp-enroll (its number). Code branches on the case,
/// never on the text; the text is what a user is told (a database's may say more, e.g. how long
/// to wait).
public enum Refusal: UInt8, Sendable, CaseIterable {
    case otherAccount = 1
    case labelTaken = 2
    case tooManyFactors = 3
    case secretTaken = 4
    case enrolledMeanwhile = 5
    case phoneTaken = 6
    case addressTaken = 7
    case noSuchFactor = 8
    case lastFactor = 9
    case noFactorYet = 10
    case noFactor = 11
    case serialTaken = 12
    case proofNeeded = 13
    case lockedOutNoSend = 14
    case sendLimited = 15
    case badPhone = 16
    case badAddress = 17
    case badHostName = 18
    case bytewiseNames = 19
    case unknownAttempt = 20
    case attemptNotDurable = 21
    case loginArguments = 22
    case enrolFirstArguments = 23
    case sendArguments = 24
    case sendKind = 25
    case enrolNeedsSecret = 26
    case importFailureBounds = 27
    case importFutureStep = 28
    case importDriftBounds = 29
    case roleMayNot = 30
    case enrolAtLoginUnavailable = 31
    case outOfBandUnavailable = 32
    case noSuchAccount = 33
    case auditNotKept = 34
    // A host's credential refused (sql/api.sql, identify): every one `isHostCredential`.
    case hostPooled = 35
    case hostRemoved = 36
    case hostCredentialMalformed = 37
    case hostUnknown = 38
    case hostCredentialMismatch = 39
    case hostClock = 40
    case hostCredentialUsed = 41
    case hostTaken = 42
    case hostName = 43
    case hostIsolation = 44
    case hostNameIsRole = 45

    /// What the user is told when the refusal comes with no text of its own.
    @_optimize(size)  // cold: not on a login's path
    public var text: Message {
        switch self {
        case .otherAccount:
            "the stored record of this name belongs to another account (another uid): root must run totp-enroll purge --user NAME first"
        case .labelTaken: "a factor with this name already exists; choose another name"
        case .tooManyFactors: "too many factors (32); remove one first"
        case .secretTaken: "this secret is already enrolled as another factor"
        case .enrolledMeanwhile: "a factor was enrolled meanwhile: enrolment at login is only for a user with none"
        case .phoneTaken: "this phone number is already enrolled"
        case .addressTaken: "this email address is already enrolled"
        case .noSuchFactor: "no factor with that label (see totp-enroll list)"
        case .lastFactor: "this is your last factor: enrol another one first (only root can remove a user's last factor)"
        case .noFactorYet: "no factor yet: enrol one first (totp-enroll), then make recovery codes"
        case .noFactor: "this user has no factor"
        case .serialTaken: "the token with this serial is already another user's factor: remove it there first"
        case .proofNeeded:
            "changing the factors or recovery codes of a user who has a factor needs a current code of that user through this host first (within 10 minutes), or a role with pam_totp_admin"
        case .lockedOutNoSend: "locked out: no code is sent"
        case .sendLimited: "no code is sent now (a sending limit): use your app or a recovery code, or try later"
        case .badPhone: "a phone number must be + then 8 to 15 digits, the first not 0 (E.164, e.g. +15105551234)"
        case .badAddress: "an email address must look like name@example.com (a host name with a dot, no IP address)"
        case .badHostName: "a host name must be 1 to 64 letters, digits, dots and hyphens"
        case .bytewiseNames: "pam_totp compares user names byte for byte: call without a nondeterministic COLLATE"
        case .unknownAttempt: "no such attempt of this role (each is finished once)"
        case .attemptNotDurable: "commit the attempt first (a verdict is told only once its attempt is durable)"
        case .loginArguments: "login: bad arguments"
        case .enrolFirstArguments: "enroll_first: bad arguments"
        case .sendArguments: "send_enrolment_code: a user, an account, a name of 1 to 64 bytes and a destination"
        case .sendKind: "send_enrolment_code: a phone or an email address only"
        case .enrolNeedsSecret:
            "a phone or an address is enrolled with totp-enroll add-phone or add-email: saved once the code sent to it is typed back"
        case .importFailureBounds: "import: a failure count or a lockout beyond what a file store holds"
        case .importFutureStep: "import: a last used step in the future is not a file store's"
        case .importDriftBounds: "import: a clock drift beyond 10 steps is not a file store's"
        case .roleMayNot:
            "the database refused: this daemon's role may not do that (unlock, purge, another user's status and the audit trail need a role with pam_totp_admin)"
        case .enrolAtLoginUnavailable: "enrolment at login is not available with this store"
        case .outOfBandUnavailable: "text-message and email factors are not available with this store yet"
        case .noSuchAccount: "no such account"
        // The database's own text says which and why (sql/api.sql, identify and add_host).
        case .hostPooled, .hostRemoved, .hostCredentialMalformed, .hostUnknown, .hostCredentialMismatch, .hostClock,
             .hostCredentialUsed, .hostIsolation:
            "the database refused this host's call (its credential or role; pam-totpd(8), add-host)"
        case .hostTaken, .hostName, .hostNameIsRole: "the database refused that host name (pam-totpd(8), add-host)"
        case .auditNotKept:
            "the audit trail is kept in fleet mode (backend = postgresql); on a single host, see the authpriv log (pam_totp, pam-totpd and totp-enroll log every login, lockout and change there)"
        }
    }

    /// The database refused the calling host's credential (or a pooled role without one).
    public var isHostCredential: Bool {
        (rawValue >= Refusal.hostPooled.rawValue && rawValue <= Refusal.hostCredentialUsed.rawValue) || self == .hostIsolation
    }

    /// Its SQLSTATE in the fleet database: `PT` and the number in three digits (`PT002`).
    public var sqlState: String {
        let n = Int(rawValue)
        return "PT" + String(n / 100) + String(n / 10 % 10) + String(n % 10)
    }

    /// The refusal a SQLSTATE names, if it is one of ours.
    public init?(sqlState: String) {
        let bytes = Array(sqlState.utf8)
        guard bytes.count == 5, bytes[0] == 0x50, bytes[1] == 0x54, bytes[2...].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        let n = Int(bytes[2] - 0x30) * 100 + Int(bytes[3] - 0x30) * 10 + Int(bytes[4] - 0x30)
        guard n <= 255, let r = Refusal(rawValue: UInt8(n)) else { return nil }
        self = r
    }
}

extension MFAError {
    /// A refusal with its own text.
    public static func refusal(_ r: Refusal) -> MFAError { .refused(r, r.text) }
}
