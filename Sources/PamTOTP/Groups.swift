import CLibc
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem

// Group membership for [group NAME] sections (docs/ARCHITECTURE.md, section 5.4): the user's primary
// group and supplementary groups from NSS, looked up once per login and only when the
// configuration has a group section.

/// Upper bound on a user's groups (NGROUPS_MAX on Linux is 65536).
let maxGroups: Int32 = 65_536

struct UserGroups {
    /// The gids the user belongs to (primary first); empty for a name NSS does not know.
    let gids: [UInt32]

    init(user: [UInt8]) throws(MFAError) {
        guard let primary = try primaryGroup(user) else {
            gids = []
            return
        }
        var name = user
        name.append(0)
        var count: Int32 = 32
        while true {
            var list = [gid_t](repeating: 0, count: Int(count))
            var n = count
            let rc = name.withUnsafeBufferPointer { p -> Int32 in
                guard let base = p.baseAddress else { return -1 }
                return base.withMemoryRebound(to: CChar.self, capacity: p.count) { getgrouplist($0, primary, &list, &n) }
            }
            if rc >= 0 {
                gids = list.prefix(Int(max(0, min(n, count)))).map { UInt32($0) }
                return
            }
            // Too small: n says how many are needed. A failure that asks for no more room is
            // another error (the function could not be found: errno says so).
            guard n > count else { throw .system(operation: "getgrouplist", errno: .current) }
            guard n <= maxGroups else { throw .system(operation: "getgrouplist", errno: .outOfRange) }
            count = n
        }
    }

    /// True if the user belongs to the group named `group`. A group NSS does not know throws
    /// (the login is denied like one with a bad line): skipping its section would fail open
    /// wherever the section is the stricter one (`exempt` then `[group mfa] exempt = no`).
    func contains(_ group: [UInt8]) throws(MFAError) -> Bool {
        guard let gid = try groupID(group) else {
            throw .invalidOption("[group " + printable(group) + "]: NSS knows no such group (a section must name an existing group)")
        }
        return gids.contains(gid)
    }
}

/// The primary gid of the account `user`, nil if there is no such account. A failed look-up
/// throws (it must deny).
func primaryGroup(_ user: [UInt8]) throws(MFAError) -> gid_t? {
    try nssLookup(user, "getpwnam_r") { name, buffer, size -> (Int32, gid_t?) in
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>? = nil
        let rc = getpwnam_r(name, &entry, buffer, size, &result)
        return (rc, rc == 0 && result != nil ? entry.pw_gid : nil)
    }
}

/// The gid of the group named `group`, nil if NSS knows no such group.
func groupID(_ group: [UInt8]) throws(MFAError) -> UInt32? {
    try nssLookup(group, "getgrnam_r") { name, buffer, size -> (Int32, UInt32?) in
        var entry = CLibc.group()
        var result: UnsafeMutablePointer<CLibc.group>? = nil
        let rc = getgrnam_r(name, &entry, buffer, size, &result)
        return (rc, rc == 0 && result != nil ? UInt32(entry.gr_gid) : nil)
    }
}
