import MFACrypto
import MFASystem

/// Enrolment at first login (`enroll_at_login`, docs/ARCHITECTURE.md, section 5.5): what the module
/// shows and checks, without the PAM conversation. A new secret, its `otpauth://` URI and
/// grouped key; the QR code drawn in Unicode half blocks from a module matrix; the answer
/// checked over the window, giving the factor to save with its step recorded as used.
public struct LoginEnrolment {
    public var secret: [UInt8]
    public let label: [UInt8]
    public private(set) var uri: OTPAuthURI

    /// A fresh 160-bit SHA-1 secret (what every authenticator app supports), labelled
    /// `USER@HOST` (at most 64 bytes) like totp-enroll's default.
    @_optimize(size)  // cold: not on a login's path
    public init<G: RandomNumberGenerator>(user: [UInt8], host: [UInt8], using generator: inout G) {
        secret = Secret.generate(for: .sha1, using: &generator)
        var l = user
        l.append(0x40)
        l += host
        label = Array(l.prefix(Factor.maxLabelLength))
        uri = OTPAuthURI(issuer: host, account: user, secret: secret, parameters: .default)
    }

    /// Wipes the secret and the URI's copy of it. The two share one buffer until one is
    /// written: wiping only `secret` wiped a fresh copy and left the shared buffer, the key
    /// itself, to be freed as it was. Every reference is wiped, so the last one wipes in place.
    public mutating func wipeSecret() {
        wipe(&secret)
        wipe(&uri.secret)
    }

    /// The Base32 key in groups of four, as totp-enroll prints it.
    public var groupedKey: [UInt8] {
        var out: [UInt8] = []
        for (i, c) in Base32.encode(secret).enumerated() {
            if i > 0 && i % 4 == 0 { out.append(ASCII.space) }
            out.append(c)
        }
        return out
    }

    /// The factor to save when `answer` is a valid code in the window at `unixTime` (its step
    /// becomes the enrolment step, so that code cannot log in again); nil otherwise. Every
    /// step is computed (TOTPVerifier).
    @_optimize(size)  // cold: not on a login's path
    public func factor(answer: [UInt8], at unixTime: Int64, verifier: TOTPVerifier) throws(MFAError) -> Factor? {
        let key = HMACKey(algorithm: .sha1, key: secret)
        guard let step = try verifier.verify(answer: answer, key: key, parameters: .default, at: unixTime) else { return nil }
        return try Factor(label: label, parameters: .default, created: unixTime, enrolledStep: step, secret: secret)
    }

    /// The QR code as lines of text: two module rows per line with Unicode half blocks and a
    /// 4-module quiet zone, light modules drawn (`qrencode -t UTF8`). `modules` holds
    /// width × width bytes, bit 0 set for a dark module.
    @_optimize(size)  // cold: not on a login's path
    public static func halfBlockLines(modules: [UInt8], width: Int) -> [[UInt8]] {
        guard width > 0, modules.count >= width * width else { return [] }
        func dark(_ x: Int, _ y: Int) -> Bool {
            x >= 0 && y >= 0 && x < width && y < width && modules[y * width + x] & 1 == 1
        }
        let quiet = 4
        var lines: [[UInt8]] = []
        var y = -quiet
        while y < width + quiet {
            var line: [UInt8] = []
            for x in -quiet..<(width + quiet) {
                switch (!dark(x, y), !dark(x, y + 1)) {
                case (true, true): line += [0xE2, 0x96, 0x88]    // U+2588 full block
                case (true, false): line += [0xE2, 0x96, 0x80]   // U+2580 upper half
                case (false, true): line += [0xE2, 0x96, 0x84]   // U+2584 lower half
                case (false, false): line.append(ASCII.space)
                }
            }
            lines.append(line)
            y += 2
        }
        return lines
    }
}
