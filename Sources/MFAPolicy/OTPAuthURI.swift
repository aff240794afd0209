import MFACrypto
import MFASystem

/// `otpauth://totp/ISSUER:ACCOUNT?secret=...&issuer=...` in Google's Key URI format (or
/// `otpauth://hotp/...&counter=N` for a counter-based factor).
/// `algorithm`, `digits` and `period` are included only when they differ from SHA1/6/30,
/// because several apps reject or mishandle URIs that spell out the defaults. Issuer and
/// account are percent-encoded (RFC 3986 unreserved characters stay as they are); the colon
/// between them is literal, so a colon inside either is `%3A` and never read as the separator.
/// Without an issuer the label is the account alone, or `:account` when the account holds a
/// colon (a bare `%3A` would be read as the separator). Leading spaces of an account are not
/// kept: Key URI labels allow spaces after the separator, and the parser drops them.
public struct OTPAuthURI: Equatable, Sendable {
    public var issuer: [UInt8]
    public var account: [UInt8]
    public var secret: [UInt8]
    public var parameters: OTPParameters
    /// An HOTP URI's counter (`otpauth://hotp/…&counter=N`); nil for TOTP.
    public var counter: UInt64?

    public init(issuer: [UInt8], account: [UInt8], secret: [UInt8], parameters: OTPParameters, counter: UInt64? = nil) {
        self.issuer = issuer
        self.account = account
        self.secret = secret
        self.parameters = parameters
        self.counter = counter
    }

    @_optimize(size)  // cold: enrolment only
    public var bytes: [UInt8] {
        var out = counter == nil ? literal("otpauth://totp/") : literal("otpauth://hotp/")
        if !issuer.isEmpty || account.contains(0x3A) {
            out += Percent.encode(issuer)
            out.append(0x3A)  // ':'
        }
        out += Percent.encode(account)
        out += literal("?secret=")
        out += Base32.encode(secret)
        if !issuer.isEmpty {
            out += literal("&issuer=")
            out += Percent.encode(issuer)
        }
        if parameters.algorithm != .sha1 {
            out += literal("&algorithm=")
            out += parameters.algorithm == .sha256 ? literal("SHA256") : literal("SHA512")
        }
        if parameters.digits != 6 {
            out += literal("&digits=")
            out += decimalBytes(UInt64(parameters.digits))
        }
        if let counter {
            out += literal("&counter=")
            out += decimalBytes(counter)
        } else if parameters.period != 30 {
            out += literal("&period=")
            out += decimalBytes(parameters.period)
        }
        return out
    }

    public var string: String { String(decoding: bytes, as: UTF8.self) }
}
