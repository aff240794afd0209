import MFACrypto
import MFASystem

// The factor seam (docs/ARCHITECTURE.md, section 2.3). A factor is a sum type: `FactorData`
// holds one kind's payload and nothing that is meaningless for it. Each kind lives in one file
// per layer: in this target TOTPFactor.swift, HOTPFactor.swift, PhoneFactor.swift and
// EmailFactor.swift (its payload, how an answer is checked, its state key, how it is
// answered); its record line in MFAFileStore (TOTPLine.swift, HOTPLine.swift, SentLine.swift);
// its wire form in MFAWire (DeviceWire.swift); its check in sql/api.sql (check_<kind>). This
// file is the one place that dispatches on the kind in this layer; the login flow, the policy
// (failures, lockout, recovery codes, one verdict per pam_authenticate), the stores' locking
// and both daemons never look at it.

/// What kind of factor a record holds (its number on the wire and its bit in `factor_kinds`).
public enum FactorKind: UInt8, Equatable, Sendable {
    /// RFC 6238 time-based codes from an authenticator app (`TOTPFactor`).
    case totp = 1
    /// RFC 4226 counter-based codes from a hardware token (`HOTPFactor`).
    case hotp = 2
    /// Codes pam-totpd sends in a text message to an E.164 number (`PhoneFactor`).
    case sms = 3
    /// Codes pam-totpd sends by email (`EmailFactor`).
    case email = 4

    /// Every kind, in number order.
    public static let all: [FactorKind] = [.totp, .hotp, .sms, .email]

    /// The kind's name in listings, JSON, `factor_kinds` and the fleet tables.
    public var name: StaticString {
        switch self {
        case .totp: return TOTPFactor.name
        case .hotp: return HOTPFactor.name
        case .sms: return PhoneFactor.name
        case .email: return EmailFactor.name
        }
    }

    /// How a user answers a factor of this kind: a code typed from a device the user holds, or
    /// a code sent to them (the factor's data is its destination, not a secret; the code is
    /// made per login, `PendingCode`).
    public var answering: Answering {
        switch self {
        case .totp: return TOTPFactor.answering
        case .hotp: return HOTPFactor.answering
        case .sms: return PhoneFactor.answering
        case .email: return EmailFactor.answering
        }
    }

    /// What a sent kind's channel says and does (its words, command, sender, refusal), nil for
    /// a kind whose codes are typed. Not on a login's path.
    @inline(never) @_optimize(size)  // one copy, cold
    public var channel: Channel? {
        switch self {
        case .totp, .hotp: return nil
        case .sms: return PhoneFactor.channel
        case .email: return EmailFactor.channel
        }
    }

    /// The kind named `name`.
    public init?(name: some Collection<UInt8>) {
        for k in FactorKind.all where equals(name, k.name) {
            self = k
            return
        }
        return nil
    }

    /// This kind's bit in a set of kinds (`ModuleOptions.factorKinds`).
    public var bit: UInt8 { UInt8(1) << (rawValue &- 1) }

    /// Every kind's bit: the default of `factor_kinds`.
    public static let allBits = bits { _ in true }

    /// The bits of the kinds whose codes are sent.
    public static let sentBits = bits { $0.answering == .sent }

    /// The bits of the kinds `keep` takes (made once: read on every login).
    private static func bits(_ keep: (FactorKind) -> Bool) -> UInt8 {
        var bits: UInt8 = 0
        for k in all where keep(k) { bits |= k.bit }
        return bits
    }
}

/// How a factor of a kind is answered at the prompt (what the login needs of it before asking).
public enum Answering: Equatable, Sendable {
    /// The user types a code from a device they hold: nothing happens before the prompt.
    case typed
    /// pam-totpd sends a code before the prompt (`OutOfBand.plan`), over the kind's `channel`.
    case sent
}

/// What differs between the channels a code is sent over: the words users and admins see,
/// the command that enrols one, the sender it goes through. Each sent kind's file defines its own.
public struct Channel: Sendable {
    /// "text message", "email": how the code travels ("a code by text message").
    public var medium: StaticString
    /// "text message to ", "email to ": before the masked destination at the prompt.
    public var promptLead: StaticString
    /// "phone number", "email address": what a destination is.
    public var destinationNoun: StaticString
    /// "number", "address": the short form, in limits' messages.
    public var shortNoun: StaticString
    /// "phone", "email": a new factor's label when none is given.
    public var defaultLabel: StaticString
    /// "add-phone", "add-email": the totp-enroll command that enrols one.
    public var addCommand: StaticString
    /// "sms_command", "email_command": pam-totpd's setting that names the sender.
    public var senderSetting: StaticString
    /// The store's refusal of a destination another factor of the same user has.
    public var taken: Refusal
    /// The `oob_allowed_prefixes` limit applies (text messages: SMS pumping).
    public var countryLimited: Bool
    /// The destination is compared without case (a mailbox however it is written).
    public var caseless: Bool

}

/// One kind's payload: everything a factor of that kind holds besides its label, creation
/// time and serial. The cases name the kinds' types in their own files.
public enum FactorData: Equatable, Sendable {
    case totp(TOTPFactor)
    case hotp(HOTPFactor)
    case sms(PhoneFactor)
    case email(EmailFactor)

    /// A sent kind's data for `destination` (not checked: `validate`), nil for a kind whose codes are typed.
    public init?(kind: FactorKind, destination: [UInt8]) {
        switch kind {
        case .sms: self = .sms(PhoneFactor(number: destination))
        case .email: self = .email(EmailFactor(address: destination))
        case .totp, .hotp: return nil
        }
    }

    /// A device kind's data for `key`, with no step or counter used yet (a status's view of a
    /// store's factor), nil for a kind whose codes are sent.
    public init?(kind: FactorKind, key: OTPKey) {
        switch kind {
        case .totp: self = .totp(TOTPFactor(key: key))
        case .hotp: self = .hotp(HOTPFactor(key: key, counter: 0))
        case .sms, .email: return nil
        }
    }

    public var kind: FactorKind {
        switch self {
        case .totp: return .totp
        case .hotp: return .hotp
        case .sms: return .sms
        case .email: return .email
        }
    }

    /// The secret and code parameters of a kind whose codes are typed from a device, nil otherwise.
    public var otpKey: OTPKey? {
        switch self {
        case .totp(let t): return t.key
        case .hotp(let h): return h.key
        case .sms, .email: return nil
        }
    }

    /// The step that proved a TOTP factor at enrolment (it and every earlier one count as used
    /// from the record alone); 0 for the other kinds (a token's first counter: `nextCounter`).
    public var enrolledStep: UInt64 {
        switch self {
        case .totp(let t): return t.enrolledStep
        case .hotp, .sms, .email: return 0
        }
    }

    /// The last step or counter a device's saved record counts as used (a fleet's
    /// `factors.last_step` at enrolment): a TOTP factor's enrolled step, a token's counter
    /// before its first unused one (-1: none); nil for a sent kind.
    public var usedAtEnrolment: Int64? {
        switch self {
        case .totp(let t): return Int64(clamping: t.enrolledStep)
        case .hotp(let h): return Int64(clamping: h.counter) &- 1
        case .sms, .email: return nil
        }
    }

    /// The kind learns its device's clock drift (TOTP: `UserState.drift(forLabel:)`).
    public var learnsDrift: Bool {
        switch self {
        case .totp: return true
        case .hotp, .sms, .email: return false
        }
    }

    /// The destination of a kind whose codes are sent, nil otherwise.
    public var destination: [UInt8]? {
        switch self {
        case .totp, .hotp: return nil
        case .sms(let p): return p.number
        case .email(let e): return e.address
        }
    }

    /// What the kind checks of its data before a new factor is saved or one is read back.
    public func validate() throws(MFAError) {
        switch self {
        case .totp(let t): try t.validate()
        case .hotp(let h): try h.validate()
        case .sms(let p): try p.validate()
        case .email(let e): try e.validate()
        }
    }

    /// The destination as users see it: `+1******1234`, `a***@example.com`; empty for a kind without one.
    public var masked: [UInt8] {
        switch self {
        case .totp, .hotp: return []
        case .sms(let p): return p.masked
        case .email(let e): return e.masked
        }
    }

    /// The factor's key in the state (`UserState.key(for:)`), from its label's key and creation time.
    func stateKey(label: UInt64, created: Int64) -> UInt64 {
        switch self {
        case .totp: return label
        case .hotp(let h): return h.stateKey(label: label, created: created)
        case .sms(let p): return sentStateKey(p.number, label: label, created: created)
        case .email(let e): return sentStateKey(e.address, label: label, created: created)
        }
    }

    /// When a state is lost (an unlock rebuilds it): the step or counter to count as used up
    /// to, nil for a kind that keeps none. Every time-based code up to `now` counts as used. A
    /// token's counter cannot be known, and starting it again at the record's would let used
    /// codes work again: every counter counts as used (the token must be enrolled again). A
    /// sent kind keeps no code beyond the one pending.
    public func usedUpTo(whenStateIsLostAt now: Int64) -> UInt64? {
        switch self {
        case .totp(let t): return (try? TOTP.step(at: now, period: t.key.parameters.period)) ?? 0
        case .hotp: return UInt64.max
        case .sms, .email: return nil
        }
    }

    /// The same data with no secret (what a status shows: a device's code parameters only).
    public var withoutSecret: FactorData {
        switch self {
        case .totp(var t): t.key.secret = []; return .totp(t)
        case .hotp(var h): h.key.secret = []; return .hotp(h)
        case .sms, .email: return self
        }
    }
}

extension Factor {
    /// A factor whose codes are sent (`kind` sms or email) to `destination`, checked.
    @_optimize(size)  // cold: a login with a phone or address only
    public init(outOfBand kind: FactorKind, label: [UInt8], destination: [UInt8], created: Int64) throws(MFAError) {
        guard let data = FactorData(kind: kind, destination: destination) else { throw .invalidParameters("this kind has no destination") }
        try data.validate()
        try self.init(label: label, created: created, data: data)
    }

    /// A factor whose codes are typed from a device (`kind` totp or hotp), checked: `enrolledStep`
    /// is a TOTP factor's, `counter` a HOTP factor's.
    public init(kind: FactorKind = .totp, label: [UInt8], parameters: OTPParameters, created: Int64,
                enrolledStep: UInt64 = 0, counter: UInt64 = 0, secret: [UInt8]) throws(MFAError) {
        let key = OTPKey(secret: secret, parameters: parameters)
        let data: FactorData
        switch kind {
        case .totp where counter == 0: data = .totp(TOTPFactor(key: key, enrolledStep: enrolledStep))
        case .hotp where enrolledStep == 0: data = .hotp(HOTPFactor(key: key, counter: counter))
        case .totp, .hotp: throw .invalidParameters("a TOTP factor has no counter, a HOTP factor no enrolled step")
        case .sms, .email: throw .invalidParameters("an out-of-band factor has a destination, not a secret")
        }
        try data.validate()
        try self.init(label: label, created: created, data: data)
    }
}

/// A phone or address enrolled again under an old label is a new factor: no code sent to the
/// old one is taken for it.
private func sentStateKey(_ destination: [UInt8], label: UInt64, created: Int64) -> UInt64 {
    fnv1a64(word: UInt64(bitPattern: created), fnv1a64(destination[...]) ^ label)
}

/// A secret shared with a device, and how the device makes its codes (TOTP, HOTP).
public struct OTPKey: Equatable, Sendable {
    public var secret: [UInt8]
    public var parameters: OTPParameters
    public init(secret: [UInt8], parameters: OTPParameters) { (self.secret, self.parameters) = (secret, parameters) }

    /// 10 to 128 bytes of secret.
    public func validate() throws(MFAError) {
        guard secret.count >= 10 && secret.count <= 128 else { throw .invalidParameters("secret must be 10 to 128 bytes") }
    }
}

/// One factor's verdict on an answer (`Factor.check`).
public struct FactorMatch: Equatable, Sendable {
    /// The unused step (TOTP) or counter (HOTP) the answer matched, nil if none.
    public var step: UInt64?
    /// The answer matched a step that was already used.
    public var replayed: Bool
    /// The factor's learned clock drift before this answer, and after it if it matched.
    public var driftBefore: Int64
    public var driftAfter: Int64
    /// HOTP: the answer alone is the code of a counter past the window but within the resync
    /// reach (`HOTPWindow.resync`): never accepted alone, it may start a resync.
    public var far: Bool = false
}

extension Factor {
    /// Checks `answer` against this factor at `unixTime`, given what `state` says is used. The
    /// whole window is computed whatever the answer (no early exit). `forwardPass`: the answer
    /// is password + code, and the code is its last digits (docs/ARCHITECTURE.md, section 5.3).
    /// `hotp`: the look-ahead of counter-based factors. `previous`: the answer before this one
    /// in the same login, which was `far` (a resync: `HOTPWindow.resync`).
    @inline(never)  // one copy, called once per factor by decide
    public func check(answer: [UInt8], previous: [UInt8]? = nil, at unixTime: Int64, verifier: TOTPVerifier, hotp: HOTPWindow,
                      state: UserState, forwardPass: Bool) throws(MFAError) -> FactorMatch {
        switch data {
        case .totp(let t): return try t.check(self, answer: answer, at: unixTime, verifier: verifier, state: state, forwardPass: forwardPass)
        case .hotp(let h): return h.check(self, answer: answer, previous: previous, window: hotp, state: state, forwardPass: forwardPass)
        case .sms, .email: return PendingCode.check(self, answer: answer, at: unixTime, state: state, forwardPass: forwardPass)
        }
    }

    /// How many digits this factor's codes have: a device's own; a sent code's, that of the
    /// live code in `state` (6 when none).
    public func digits(state: UserState) -> Int {
        if let key = otpKey { return key.parameters.digits }
        return Int(state.pending?.digits ?? 6)
    }
}
