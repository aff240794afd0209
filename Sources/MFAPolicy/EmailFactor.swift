import MFASystem

/// Codes pam-totpd sends by email: the kind's payload and its policy (FactorKind.swift
/// dispatches here; a sent code is checked as every sent kind's is, `PendingCode.check`; its
/// record line is MFAFileStore/SentLine.swift, its wire form MFAWire/AdminProtocol.swift (a destination alone),
/// its check sql/api.sql's check_sent).
public struct EmailFactor: Equatable, Sendable {
    static let name: StaticString = "email"
    static let answering = Answering.sent
    static var channel: Channel {
        Channel(
            medium: "email", promptLead: "email to ", destinationNoun: "email address", shortNoun: "address",
            defaultLabel: "email", addCommand: "add-email", senderSetting: "email_command", taken: .addressTaken,
            countryLimited: false, caseless: true)
    }

    /// `name@host.example` (`Destination.validateEmail`).
    public var address: [UInt8]
    public init(address: [UInt8]) { self.address = address }

    func validate() throws(MFAError) { try Destination.validateEmail(address) }
    var masked: [UInt8] { Destination.maskEmail(address) }
}
