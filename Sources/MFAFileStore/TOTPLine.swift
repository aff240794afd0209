import MFACrypto
import MFAPolicy
import MFASystem

// A TOTP factor's line in a record (MFAPolicy/TOTPFactor.swift is the kind):
// `factor <label> <sha1|sha256|sha512> <digits> <period> <created> <enrolled step> <secret, Base32>`
// (version 1 has no enrolled step).
extension TOTPFactor {
    static let recordKeyword: StaticString = "factor"

    @_optimize(size)  // cold: not on a login's path
    func appendRecordFields(created: Int64, to out: inout [UInt8]) {
        RecordFields.appendKeyHead(key, to: &out)
        RecordFields.appendNumber(key.parameters.period, to: &out)
        RecordFields.appendNumber(UInt64(bitPattern: created), to: &out)
        RecordFields.appendNumber(enrolledStep, to: &out)
        RecordFields.appendSecret(key.secret, to: &out)
    }

    static func parseRecordFields(_ r: RecordFields) throws(MFAError) -> (label: [UInt8], created: Int64, data: FactorData) {
        try r.expect(r.version == 2 ? 8 : 7)
        let label = try r.label()
        let algorithm = try r.algorithm()
        guard let digits = r.number(3, limit: 8), let period = r.number(4, limit: OTPParameters.periodRange.upperBound),
              let created = r.number(5, limit: UInt64(Int64.max)),
              let enrolledStep = r.version == 2 ? r.number(6, limit: UInt64.max) : 0 else {
            throw .corruptRecord("bad factor number")
        }
        let key = try r.key(algorithm, digits: digits, period: period)
        return (label, Int64(created), .totp(TOTPFactor(key: key, enrolledStep: enrolledStep)))
    }
}
