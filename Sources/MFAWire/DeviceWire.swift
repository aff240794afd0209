import MFACrypto
import MFAPolicy
import MFASystem

// The devices' wire forms in the admin protocol (after kind, label, created and serial:
// AdminCodec.write): TOTP `<algorithm u8> <digits u8> <period u32> <enrolled step u64> [<secret>]`,
// HOTP `<algorithm u8> <digits u8> <counter u64> [<secret>]` (MFAPolicy/ has the kinds).
// The sent kinds' form is their destination alone (`AdminCodec.write`).

extension TOTPFactor {
    func write(withSecret: Bool, _ b: inout [UInt8]) {
        AdminCodec.writeHead(key, &b)
        Writer.u32(UInt32(truncatingIfNeeded: key.parameters.period), &b)
        Writer.u64(enrolledStep, &b)
        if withSecret { Writer.short(key.secret, &b) }
    }

    /// Its parameters checked; the secret is checked with the factor (`FactorData.validate`).
    static func read(_ r: inout Reader, withSecret: Bool) -> FactorData? {
        guard let (alg, digits) = AdminCodec.readHead(&r), let period = r.u32(), let step = r.u64(),
              let parameters = try? OTPParameters(algorithm: alg, digits: Int(digits), period: UInt64(period)),
              let secret = withSecret ? r.short() : [] else { return nil }
        return .totp(TOTPFactor(key: OTPKey(secret: secret, parameters: parameters), enrolledStep: step))
    }
}

extension HOTPFactor {
    func write(withSecret: Bool, _ b: inout [UInt8]) {
        AdminCodec.writeHead(key, &b)
        Writer.u64(counter, &b)
        if withSecret { Writer.short(key.secret, &b) }
    }

    static func read(_ r: inout Reader, withSecret: Bool) -> FactorData? {
        guard let (alg, digits) = AdminCodec.readHead(&r), let counter = r.u64(), counter <= HOTPWindow.maxCounter,
              let parameters = try? OTPParameters(algorithm: alg, digits: Int(digits), period: OTPParameters.default.period),
              let secret = withSecret ? r.short() : [] else { return nil }
        return .hotp(HOTPFactor(key: OTPKey(secret: secret, parameters: parameters), counter: counter))
    }
}

extension AdminCodec {
    static func writeHead(_ key: OTPKey, _ b: inout [UInt8]) {
        b.append(algorithmByte(key.parameters.algorithm))
        b.append(UInt8(truncatingIfNeeded: key.parameters.digits))
    }

    static func readHead(_ r: inout Reader) -> (HashAlgorithm, UInt8)? {
        guard let alg = r.u8().flatMap(algorithm), let digits = r.u8() else { return nil }
        return (alg, digits)
    }
}
