import CLibc
import MFADaemon
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// The account named `name` in NSS (canonical name and uid), through getpwnam_r with a buffer
/// that grows on ERANGE up to 1 MiB; nil if there is none. A failed look-up throws: the request
/// is denied, never treated as "no such account".
func lookupAccount(_ name: [UInt8]) throws(MFAError) -> Account? {
    guard !name.contains(0) else { return nil }
    var cName = name.map { CChar(bitPattern: $0) }
    cName.append(0)
    var size = 4096
    while size <= 1 << 20 {
        var buffer = [CChar](repeating: 0, count: size)
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>? = nil
        let rc = getpwnam_r(cName, &entry, &buffer, size, &result)
        if rc == ERANGE { size *= 4; continue }
        guard rc == 0 else { throw .system(operation: "getpwnam_r", errno: Errno(rc)) }
        guard result != nil, let pwName = entry.pw_name else { return nil }
        return Account(name: Array(String(cString: pwName).utf8), uid: UInt32(entry.pw_uid))
    }
    throw .system(operation: "getpwnam_r", errno: .outOfRange)
}

/// pam-totpd's account look-up: /etc/passwd read once per version of the file, so that a
/// request's cost does not grow with the number of local accounts (glibc's `files` source
/// scans the file for every getpwnam). Used only while nsswitch.conf makes `files` the passwd
/// database's first source and the file reads the same to us as to glibc (`PasswdFile`); a
/// name not in the file, and everything while the cache is off, goes to NSS as before. Each
/// request checks both files' identity (device, inode, size, modification and change times):
/// an edit, a rename over them (useradd, vipw) or a bind mount is seen at the next request.
final class AccountCache: @unchecked Sendable {
    static let shared = AccountCache()

    let passwdPath: String
    let nsswitchPath: String
    /// The same paths as C strings, made once: every request stats both files.
    private let passwdCPath: [CChar]
    private let nsswitchCPath: [CChar]
    /// The file as last read and the identity it was read at (nil: the cache is off).
    private let cached = Locked<(key: Identity?, file: PasswdFile?)>((nil, nil))

    /// What tells one version of a file from another.
    struct Stamp: Equatable {
        var device: UInt64, inode: UInt64, size: Int64
        var modified: Int64, modifiedNanoseconds: Int64, changed: Int64, changedNanoseconds: Int64
    }
    struct Identity: Equatable {
        var passwd: Stamp
        var nsswitch: Stamp
    }

    init(passwd: String = "/etc/passwd", nsswitch: String = "/etc/nsswitch.conf") {
        passwdPath = passwd
        nsswitchPath = nsswitch
        passwdCPath = Array(passwd.utf8CString)
        nsswitchCPath = Array(nsswitch.utf8CString)
    }

    /// The account named `name` (see `lookupAccount`).
    func lookup(_ name: [UInt8]) throws(MFAError) -> Account? {
        if let uid = cachedUID(name) { return Account(name: name, uid: uid) }
        return try lookupAccount(name)
    }

    /// `name`'s uid from the current /etc/passwd, nil if the cache is off or it has no such line.
    func cachedUID(_ name: [UInt8]) -> UInt32? {
        guard let now = identity() else { return nil }
        return cached.withLock { c in
            if c.key != now {
                // Read, then check nothing moved while reading: a file caught mid-change is used
                // from the next request on.
                let read = Self.load(passwd: passwdPath, nsswitch: nsswitchPath)
                c.key = identity() == now ? now : nil
                c.file = c.key == nil ? nil : read
            }
            return c.file?.uids[name]
        }
    }

    /// Both files' identity, nil if either cannot be examined. No allocation: it runs per request.
    func identity() -> Identity? {
        guard let passwd = Self.stamp(passwdCPath), let nsswitch = Self.stamp(nsswitchCPath) else { return nil }
        return Identity(passwd: passwd, nsswitch: nsswitch)
    }

    static func stamp(_ path: [CChar]) -> Stamp? {
        var st = stat()
        let rc = path.withUnsafeBufferPointer { p -> Int32 in
            guard let base = p.baseAddress else { return -1 }
            return stat(base, &st)
        }
        guard rc == 0 else { return nil }
        return Stamp(device: UInt64(st.st_dev), inode: UInt64(st.st_ino), size: Int64(st.st_size),
                     modified: Int64(st.st_mtim.tv_sec), modifiedNanoseconds: Int64(st.st_mtim.tv_nsec),
                     changed: Int64(st.st_ctim.tv_sec), changedNanoseconds: Int64(st.st_ctim.tv_nsec))
    }

    static func load(passwd: String, nsswitch: String) -> PasswdFile? {
        guard let conf = readSmallFile(nsswitch, limit: 1 << 20), PasswdFile.filesFirst(nsswitch: conf),
              let bytes = readSmallFile(passwd, limit: PasswdFile.maxSize) else { return nil }
        return PasswdFile(parsing: bytes)
    }

    /// A regular file's bytes, nil if it cannot be read or is over `limit`.
    static func readSmallFile(_ path: String, limit: Int) -> [UInt8]? {
        let fd = clibc_open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG), st.st_size <= limit else { return nil }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 { if clibc_errno() == EINTR { continue }; return nil }
            if n == 0 { break }
            out += chunk[0..<n]
            if out.count > limit { return nil }
        }
        return out
    }
}
