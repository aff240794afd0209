import MFACrypto
import MFASystem

/// Enrolment at first login (`enroll_at_login`, docs/ARCHITECTURE.md, section 5.5): what the module
/// shows and checks, without the PAM conversation. A new secret, its `otpauth://` URI and
/// grouped key; the QR code drawn in Unicode half blocks from a module matrix. The store checks
/// the answer and saves the factor (`TOTPStore.enrollAtLogin`).
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

/// What enrolment at first login came to (`TOTPStore.enrollAtLogin`; pam-totpd's reply kind 12).
public enum FirstFactor: UInt8, Equatable, Sendable {
    /// The checks passed: the user may enrol the factor (nothing changed; pam-totpd's op 4).
    case mayEnrol = 0
    /// Saved, with the proving step used.
    case enrolled = 1
    /// The code did not verify: nothing saved.
    case wrongCode = 2
    /// The user has a factor (enrolled while the prompt was open, from this host or another):
    /// nothing added.
    case hadFactor = 3
}
