import MFAPolicy

// The sent kinds' lines in a record (MFAPolicy/PhoneFactor.swift, EmailFactor.swift are
// the kinds), version 2 only, no secret (`RecordFields.sent`):
// `sms <label> <created> <number, percent-encoded>`, `email <label> <created> <address, percent-encoded>`.
extension PhoneFactor {
    static let recordKeyword: StaticString = "sms"
}

extension EmailFactor {
    static let recordKeyword: StaticString = "email"
}
