import Glibc
import MFAAdmin
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
