import MFASystem

/// /etc/passwd as pam-totpd's account cache holds it (pam-totpd Accounts.swift): each name's
/// uid, as glibc's `files` source answers getpwnam — the first line with the name wins.
///
/// Only a file every line of which glibc reads the same way is used: `name:password:uid:gid:
/// gecos:dir:shell` with a non-empty name and a decimal uid below 2^32, or an empty line. A
/// comment, a line with leading white space, a compat-mode `+`/`-` line, a wrong field count or
/// an odd uid makes the whole file unusable (nil): the daemon then asks NSS for every request,
/// as it did before, rather than guess how glibc would read it.
public struct PasswdFile: Equatable, Sendable {
    /// The largest file read (100,000 accounts take about 5 MB).
    public static let maxSize = 64 << 20

    public private(set) var uids: [[UInt8]: UInt32] = [:]

    public init?(parsing bytes: [UInt8]) {
        guard bytes.count <= Self.maxSize else { return nil }
        var lineStart = 0
        while lineStart < bytes.count {
            var lineEnd = lineStart
            while lineEnd < bytes.count && bytes[lineEnd] != 0x0A { lineEnd += 1 }
            if lineEnd > lineStart {
                guard let (name, uid) = Self.entry(bytes[lineStart..<lineEnd]) else { return nil }
                if uids[name] == nil { uids[name] = uid }
            }
            lineStart = lineEnd + 1
        }
    }

    /// One line's name and uid; nil for anything but a plain seven-field entry.
    static func entry(_ line: ArraySlice<UInt8>) -> (name: [UInt8], uid: UInt32)? {
        var fields: [ArraySlice<UInt8>] = []
        var start = line.startIndex
        for i in line.indices where line[i] == 0x3A {  // ':'
            fields.append(line[start..<i])
            start = i + 1
            if fields.count > 6 { return nil }
        }
        fields.append(line[start..<line.endIndex])
        guard fields.count == 7, let name = fields.first, let first = name.first,
              first != 0x23, first != 0x2B, first != 0x2D,  // '#', '+', '-'
              !name.contains(where: { $0 <= 0x20 || $0 == 0x7F }),
              !line.contains(0),
              let uid = parseDecimal(fields[2], limit: UInt64(UInt32.max)) else { return nil }
        return (Array(name), UInt32(uid))
    }

    /// Whether `nsswitch.conf` makes `files` the first source of the passwd database, so that a
    /// name found in /etc/passwd is what getpwnam returns (and a name not found there is asked
    /// of NSS). A missing line, or any other first source, is false.
    public static func filesFirst(nsswitch bytes: [UInt8]) -> Bool {
        var result = false
        var lineStart = 0
        while lineStart < bytes.count {
            var lineEnd = lineStart
            while lineEnd < bytes.count && bytes[lineEnd] != 0x0A { lineEnd += 1 }
            var line = Array(bytes[lineStart..<lineEnd])
            if let hash = line.firstIndex(of: 0x23) { line.removeSubrange(hash...) }
            let words = line.split(whereSeparator: { $0 == 0x20 || $0 == 0x09 || $0 == 0x3A })
            // glibc reads the first "passwd:" line only.
            if let key = words.first, equals(key, "passwd"), line.contains(0x3A) {
                result = words.count >= 2 && equals(words[1], "files")
                return result
            }
            lineStart = lineEnd + 1
        }
        return result
    }
}
