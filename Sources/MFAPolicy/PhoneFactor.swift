import MFASystem

/// Codes pam-totpd sends in a text message to an E.164 number: the kind's payload and its
/// policy (FactorKind.swift dispatches here; a sent code is checked as every sent kind's is,
/// `PendingCode.check`; its record line is MFAFileStore/SentLine.swift, its wire form
/// MFAWire/AdminProtocol.swift (a destination alone), its check sql/api.sql's check_sent).
public struct PhoneFactor: Equatable, Sendable {
    static let name: StaticString = "sms"
    static let answering = Answering.sent
    static var channel: Channel {
        Channel(
            medium: "text message", promptLead: "text message to ", destinationNoun: "phone number", shortNoun: "number",
            defaultLabel: "phone", addCommand: "add-phone", senderSetting: "sms_command", taken: .phoneTaken,
            countryLimited: true, caseless: false)
    }

    /// "+" then 8–15 digits (`Destination.validatePhone`).
    public var number: [UInt8]
    public init(number: [UInt8]) { self.number = number }

    func validate() throws(MFAError) { try Destination.validatePhone(number) }
    var masked: [UInt8] { Destination.maskPhone(number) }
}
