import CLibc
import MFASystem

// pam-totpd's rules for sharing itself among callers (docs/ARCHITECTURE.md, section 5.2): the
// limits, the counts that enforce them, the log budget and whose a subordinate uid is. Pure
// state, tested in memory (LibraryTests' DaemonLimitsTests); Server.swift applies them.

/// The limits that keep one caller from stopping the daemon answering others
/// (docs/ARCHITECTURE.md, section 5.2). Memory per connection is bounded by `maxFrameSize`.
public struct Limits {
    public init() {}

    /// From accept to a complete request: a slow or half-open client is closed after this.
    public var requestTimeoutMilliseconds: Int64 = 5_000
    /// Open connections in all; beyond it a new connection is closed at once.
    public var maxConnections = 4096
    /// Open connections per uid other than root: one user's flood cannot use up the rest. A
    /// uid in a user's subordinate range (/etc/subuid) counts as that user (`SubordinateIDs`).
    public var maxConnectionsPerUser = 64
    /// Requests waiting for a worker thread; beyond it the reply is "busy" (denied).
    public var maxQueued = 256
    /// Of those, what callers other than root may never take: root's requests (sshd, su,
    /// sudo, login) always find room.
    public var connectionsForRootOnly: Int { max(4, maxConnections / 16) }
    public var queuedForRootOnly: Int { max(4, maxQueued / 4) }
    /// Log lines a caller other than root can cause per minute: per uid, and in all; beyond
    /// them lines are counted and reported in one summary line (`LogBudget`).
    public var logLinesPerUserPerMinute = 20
    public var logLinesPerMinute = 300
    /// Requests of one uid other than root waiting for or held by a worker (counted until the
    /// worker is done, whether or not the caller is still connected): one user's flood cannot
    /// fill the queue or make others wait behind more than a few of its requests.
    public var maxQueuedPerUser = 8
    /// Worker threads for store operations (file I/O, a per-user lock of up to 5 s). At most
    /// one works for any one account at a time (`ServerState.serialize`): an account whose
    /// lock is stuck holds one worker, never all of them.
    public var workers = 4
    /// Under socket activation: exit after this long without a connection (systemd starts
    /// the daemon again on the next one). nil: never.
    public var idleExitSeconds: Int64? = nil
    /// `trusted_callers`' uids: each charged to itself, as any caller without root (never root's
    /// reserve, which keeps sshd, su and sudo served), with `trustedShare` times a user's share
    /// of the connections, the queue and the log lines, as it answers for many users (FreeRADIUS).
    public var trustedUIDs: [UInt32] = []
    public var trustedShare = 4
}

/// A count with limits (open connections, queued requests): `total` in all, of which callers
/// other than root may never take the last `forRootOnly`, and `perUser` per uid other than root.
public struct Quota {
    public let total: Int
    public let forRootOnly: Int
    public let perUser: Int
    /// uids with `share` times `perUser` (trusted callers); still never root's reserve.
    public let larger: [UInt32]
    public let share: Int
    public private(set) var used = 0
    private var byUser: [UInt32: Int] = [:]

    public init(total: Int, forRootOnly: Int, perUser: Int, larger: [UInt32] = [], share: Int = 1) {
        self.total = total
        self.forRootOnly = forRootOnly
        self.perUser = perUser
        self.larger = larger
        self.share = max(share, 1)
    }

    /// One more for `uid` (0: root), or false if that is over a limit.
    public mutating func take(uid: UInt32) -> Bool {
        guard used < total else { return false }
        if uid != 0 {
            guard used < total - forRootOnly else { return false }
            let n = byUser[uid, default: 0]
            guard n < (larger.contains(uid) ? perUser * share : perUser) else { return false }
            byUser[uid] = n + 1
        }
        used += 1
        return true
    }

    /// One fewer for `uid` (after a `take` that returned true).
    public mutating func give(uid: UInt32) {
        used -= 1
        if uid != 0 {
            let n = byUser[uid, default: 1] - 1
            if n <= 0 { byUser[uid] = nil } else { byUser[uid] = n }
        }
    }
}

/// The log lines callers other than root may cause in a minute: `perUser` per charged uid and
/// `total` in all; the rest are counted, and the first line after the minute is preceded by
/// one summary (nothing an attacker sends yields more than total + 1 lines a minute).
public struct LogBudget {
    public init() {}

    private var windowStart: Int64 = 0
    private var spent: [UInt32: Int] = [:]
    private var suppressed: [UInt32: Int] = [:]
    private var total = 0

    public mutating func spend(uid: UInt32, now: Int64, perUser: Int, total limit: Int) -> (allowed: Bool, summary: String?) {
        var summary: String? = nil
        if now - windowStart >= 60 {
            if !suppressed.isEmpty {
                let all = suppressed.values.reduce(0, +)
                let top = suppressed.sorted { $0.value > $1.value }.prefix(5).map { "uid \($0.key): \($0.value)" }
                summary = "\(all) more log lines caused by callers were suppressed in the last minute (\(top.joined(separator: ", "))"
                    + (suppressed.count > 5 ? ", and \(suppressed.count - 5) more uids)" : ")")
            }
            windowStart = now
            spent = [:]
            suppressed = [:]
            total = 0
        }
        let mine = spent[uid, default: 0]
        guard mine < perUser, total < limit else {
            if suppressed.count < 4096 || suppressed[uid] != nil { suppressed[uid, default: 0] += 1 }
            return (false, summary)
        }
        spent[uid] = mine + 1
        total += 1
        return (true, summary)
    }
}

/// Which user a uid in a subordinate range belongs to (/etc/subuid: `owner:first:count`, owner a
/// name or a uid): a user with newuidmap (rootless containers) appears to the daemon as many
/// uids, and each is charged to that user. Re-read when the file changes (inode, size, mtime).
public final class SubordinateIDs: @unchecked Sendable {
    public static let shared = SubordinateIDs(path: "/etc/subuid")
    /// The file's path as a C string, made once (it is checked at every request).
    private let cPath: [CChar]
    private let lock = Locked<Void>(())
    private var stamp: (ino_t, off_t, Int, Int) = (0, -1, 0, 0)
    private var ranges: [(first: UInt32, count: UInt32, owner: UInt32)] = []

    public init(path: String) { cPath = Array(path.utf8CString) }

    public func owner(of uid: UInt32) -> UInt32? {
        lock.withLock { _ in
            reloadIfChanged()
            for r in ranges where uid >= r.first && UInt64(uid) < UInt64(r.first) + UInt64(r.count) { return r.owner }
            return nil
        }
    }

    private func reloadIfChanged() {
        var st = stat()
        guard stat(cPath, &st) == 0 else { ranges = []; stamp = (0, -1, 0, 0); return }
        let now = (st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec)
        guard now != stamp else { return }
        stamp = now
        ranges = []
        let fd = clibc_open(cPath, O_RDONLY | O_CLOEXEC, 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while bytes.count < 16 << 20 {
            let n = read(fd, &chunk, chunk.count)
            guard n > 0 else { break }
            bytes += chunk[0..<n]
        }
        for line in bytes.split(separator: 0x0A) {
            let f = line.split(separator: 0x3A, omittingEmptySubsequences: false)
            guard f.count == 3, let first = UInt32(String(decoding: f[1], as: UTF8.self)),
                  let count = UInt32(String(decoding: f[2], as: UTF8.self)), count > 0 else { continue }
            let name = String(decoding: f[0], as: UTF8.self)
            let owner: UInt32?
            if let n = UInt32(name) { owner = n } else { owner = getpwnam(name).map { $0.pointee.pw_uid } }
            if let owner, owner != 0 { ranges.append((first, count, owner)) }
        }
    }
}

/// A value behind a pthread mutex (Synchronization's Mutex is not in Embedded Swift for Linux,
/// pam-totpd's build). The mutex lives in its own allocation, never moved.
public final class Locked<Value> {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func withLock<R>(_ body: (inout Value) -> R) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body(&value)
    }
}

extension Locked: @unchecked Sendable where Value: Sendable {}
