import MFACrypto
import MFAPolicy
import MFASystem

// A HOTP factor's line in a record (MFAPolicy/HOTPFactor.swift is the kind), version 2 only:
// `hotp <label> <sha1|sha256|sha512> <digits> <counter> <created> <secret, Base32>`
// (the counter: the first one not used at enrolment).
extension HOTPFactor {
    static let recordKeyword: StaticString = "hotp"

    @_optimize(size)  // cold: not on a login's path
    func appendRecordFields(created: Int64, to out: inout [UInt8]) {
        RecordFields.appendKeyHead(key, to: &out)
        RecordFields.appendNumber(counter, to: &out)
        RecordFields.appendNumber(UInt64(bitPattern: created), to: &out)
        RecordFields.appendSecret(key.secret, to: &out)
    }

    static func parseRecordFields(_ r: RecordFields) throws(MFAError) -> (label: [UInt8], created: Int64, data: FactorData) {
        try r.expect(r.version == 2 ? 7 : 0)
        let label = try r.label()
        let algorithm = try r.algorithm()
        guard let digits = r.number(3, limit: 8), let counter = r.number(4, limit: UInt64.max),
              let created = r.number(5, limit: UInt64(Int64.max)) else {
            throw .corruptRecord("bad factor number")
        }
        let key = try r.key(algorithm, digits: digits, period: OTPParameters.default.period)
        return (label, Int64(created), .hotp(HOTPFactor(key: key, counter: counter)))
    }
}
