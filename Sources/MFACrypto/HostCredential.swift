import MFASystem

/// A host's own credential (docs/ARCHITECTURE.md, section 4, rule 20; docs/FLEET.md, "Host
/// credentials"): the name `pam-totpd add-host` registered and the 32-byte key the database made
/// for it. Every call the host makes carries a fresh `v1:HOST:STAMP:NONCE:MAC` for that call
/// (sql/api.sql, identify), so a pool may map every host to one login role while the database
/// still knows which host calls; the key itself never leaves this process.
public struct HostCredential: Sendable {
    public let host: String
    let key: HMACKey

    /// The file `host_credential = PATH` names (written by add-host): one line,
    /// `pam_totp-host v1 NAME KEY` (KEY: 64 lower-case hex digits).
    static let magic = "pam_totp-host v1 "

    /// A host's name as the database takes it: 1 to 63 letters, digits, dots, underscores and
    /// hyphens, the first a letter or digit.
    public static func validName(_ name: [UInt8]) -> Bool {
        guard let first = name.first, name.count <= 63, isAlphanumeric(first) else { return false }
        return name.allSatisfy { isAlphanumeric($0) || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D }
    }

    private static func isAlphanumeric(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
    }

    public init?(host: [UInt8], key: [UInt8]) {
        guard Self.validName(host), key.count == 32 else { return nil }
        self.host = String(decoding: host, as: UTF8.self)
        self.key = HMACKey(algorithm: .sha256, key: key)
    }

    /// The credential file's bytes, or nil if they are not one (no detail: the caller names
    /// the file; nothing of the key is ever echoed).
    public static func parse(_ bytes: [UInt8]) -> HostCredential? {
        let magic = Array(Self.magic.utf8)
        let end = bytes.last == 0x0A ? bytes.count - 1 : bytes.count
        guard end > magic.count, bytes.starts(with: magic) else { return nil }
        guard let space = bytes[magic.count..<end].firstIndex(of: 0x20) else { return nil }
        let name = Array(bytes[magic.count..<space])
        guard end - (space + 1) == 64 else { return nil }
        // The key's copy is zeroed once the HMAC's pad states are made (which keep no key).
        var key = Hex.decode(bytes[(space + 1)..<end]) ?? []
        defer { for i in key.indices { key[i] = 0 } }
        guard key.count == 32 else { return nil }
        return HostCredential(host: name, key: key)
    }

    /// The file's line for `host` and its key in lower-case hex, as the database returns it
    /// (add-host writes it, mode 0600; `parse` reads it).
    public static func line(host: String, hexKey: String) -> [UInt8] {
        Array((Self.magic + host + " " + hexKey + "\n").utf8)
    }

    /// The credential of one call: `operation` (the function's name) with `arguments` as that
    /// function receives them, each as its canonical text (nil: NULL; FleetStore's
    /// `PQValue.canonical`), stamped `stamp` (Unix seconds) with a 16-byte `nonce`. The MAC's
    /// message is identify's (sql/api.sql): each argument length-prefixed.
    public func credential(operation: String, arguments: [String?], stamp: Int64, nonce: [UInt8]) -> String {
        let nonceHex = hex(nonce)
        var message = "pam_totp host call v1\n" + host + "\n" + String(stamp) + "\n" + nonceHex + "\n" + operation + "\n"
        for a in arguments {
            if let c = a { message += "+" + String(c.utf8.count) + ":" + c + "\n" } else { message += "-\n" }
        }
        let mac = key.authenticate(Array(message.utf8))
        return "v1:" + host + ":" + String(stamp) + ":" + nonceHex + ":" + hex(mac)
    }
}

/// Lower-case hex, as the database's encode(..., 'hex').
private func hex(_ bytes: [UInt8]) -> String { String(decoding: Hex.encode(bytes), as: UTF8.self) }
