import Glibc
import Logging
import MFAAdmin
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// The limits that keep one caller from stopping the daemon answering others
/// (docs/ARCHITECTURE.md, section 5.2). Memory per connection is bounded by `maxFrameSize`.
struct Limits {
    /// From accept to a complete request: a slow or half-open client is closed after this.
    var requestTimeout: TimeAmount = .seconds(5)
    /// Open connections in all; beyond it a new connection is closed at once.
    var maxConnections = 4096
    /// Open connections per uid other than root: one user's flood cannot use up the rest. A
    /// uid in a user's subordinate range (/etc/subuid) counts as that user (`SubordinateIDs`).
    var maxConnectionsPerUser = 64
    /// Requests waiting for a worker thread; beyond it the reply is "busy" (denied).
    var maxQueued = 256
    /// Of those, what callers other than root may never take: root's requests (sshd, su,
    /// sudo, login) always find room.
    var connectionsForRootOnly: Int { max(4, maxConnections / 16) }
    var queuedForRootOnly: Int { max(4, maxQueued / 4) }
    /// Log lines a caller other than root can cause per minute: per uid, and in all; beyond
    /// them lines are counted and reported in one summary line (`LogBudget`).
    var logLinesPerUserPerMinute = 20
    var logLinesPerMinute = 300
    /// Requests of one uid other than root waiting for or held by a worker (counted until the
    /// worker is done, whether or not the caller is still connected): one user's flood cannot
    /// fill the queue or make others wait behind more than a few of its requests.
    var maxQueuedPerUser = 8
    /// Worker threads for store operations (file I/O, a per-user lock of up to 5 s). At most
    /// one works for any one account at a time (`ServerState.serialize`): an account whose
    /// lock is stuck holds one worker, never all of them.
    var workers = 4
    /// Under socket activation: exit after this long without a connection (systemd starts
    /// the daemon again on the next one). nil: never.
    var idleExit: TimeAmount? = nil
}

/// A count with limits (open connections, queued requests): `total` in all, of which callers
/// other than root may never take the last `forRootOnly`, and `perUser` per uid other than root.
struct Quota {
    let total: Int
    let forRootOnly: Int
    let perUser: Int
    private(set) var used = 0
    private var byUser: [UInt32: Int] = [:]

    init(total: Int, forRootOnly: Int, perUser: Int) {
        self.total = total
        self.forRootOnly = forRootOnly
        self.perUser = perUser
    }

    /// One more for `uid` (0: root), or false if that is over a limit.
    mutating func take(uid: UInt32) -> Bool {
        guard used < total else { return false }
        if uid != 0 {
            guard used < total - forRootOnly else { return false }
            let n = byUser[uid, default: 0]
            guard n < perUser else { return false }
            byUser[uid] = n + 1
        }
        used += 1
        return true
    }

    /// One fewer for `uid` (after a `take` that returned true).
    mutating func give(uid: UInt32) {
        used -= 1
        if uid != 0 {
            let n = byUser[uid, default: 1] - 1
            if n <= 0 { byUser[uid] = nil } else { byUser[uid] = n }
        }
    }
}

/// `SO_PEERCRED` as the kernel fills it (struct ucred: pid_t, uid_t, gid_t).
struct PeerCred: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

/// One request answered: DaemonService.handle on the backend the configuration names.
typealias RequestHandlerFunction = (DaemonRequest, PeerCredentials, Int64) -> (reply: DaemonReply, log: Message)
/// One enrolment-management request (totp-enroll, AdminProtocol): DaemonService.handleAdmin.
typealias AdminHandlerFunction = (AdminRequest, PeerCredentials, Int64) -> (reply: AdminReply, log: Message)

/// Shared by every connection: the counters, the service and the worker pool.
final class ServerState: @unchecked Sendable {
    let limits: Limits
    let handle: RequestHandlerFunction
    let handleAdmin: AdminHandlerFunction
    let pool: NIOThreadPool
    let logger: Logger
    private let lock = NIOLock()
    private var connections: Quota
    private var queue: Quota
    private var lastActivity = NIODeadline.now()
    /// Accounts a worker is answering a request for, and the requests waiting for each.
    private var busyAccounts: [[UInt8]: [() -> Void]] = [:]
    private var logBudget = LogBudget()

    init(limits: Limits, handle: @escaping RequestHandlerFunction, handleAdmin: @escaping AdminHandlerFunction,
         pool: NIOThreadPool, logger: Logger) {
        self.limits = limits
        self.handle = handle
        self.handleAdmin = handleAdmin
        self.pool = pool
        self.logger = logger
        connections = Quota(total: limits.maxConnections, forRootOnly: limits.connectionsForRootOnly, perUser: limits.maxConnectionsPerUser)
        queue = Quota(total: limits.maxQueued, forRootOnly: limits.queuedForRootOnly, perUser: limits.maxQueuedPerUser)
    }

    /// A new connection from `uid`: false if it is over a limit (then it is closed at once).
    func admit(uid: UInt32) -> Bool {
        lock.withLock {
            lastActivity = .now()
            return connections.take(uid: uid)
        }
    }

    func release(uid: UInt32) {
        lock.withLock {
            connections.give(uid: uid)
            lastActivity = .now()
        }
    }

    func enqueue(uid: UInt32) -> Bool {
        lock.withLock { queue.take(uid: uid) }
    }

    func dequeue(uid: UInt32) {
        lock.withLock { queue.give(uid: uid) }
    }

    /// Runs `start` now if no worker is answering a request for `account`, else after the
    /// ones before it; `start` must call `finished(account:)` when its work is done. One
    /// account's stuck store lock (a stopped su holding it) then delays only that account.
    func serialize(account: [UInt8], _ start: @escaping () -> Void) {
        let now: Bool = lock.withLock {
            if busyAccounts[account] != nil {
                busyAccounts[account, default: []].append(start)
                return false
            }
            busyAccounts[account] = []
            return true
        }
        if now { start() }
    }

    func finished(account: [UInt8]) {
        let next: (() -> Void)? = lock.withLock {
            guard var waiting = busyAccounts[account], !waiting.isEmpty else {
                busyAccounts[account] = nil
                return nil
            }
            let first = waiting.removeFirst()
            busyAccounts[account] = waiting
            return first
        }
        next?()
    }

    /// Logs a line a caller charged to `uid` caused: root's always; any other uid's within
    /// its budget (`LogBudget`), with one summary line for what a minute suppressed.
    func log(_ level: Logger.Level, uid: UInt32, _ line: @autoclosure () -> String) {
        guard uid != 0 else { logger.log(level: level, "\(line())"); return }
        let (allowed, summary) = lock.withLock {
            logBudget.spend(uid: uid, now: monotonicSeconds(), perUser: limits.logLinesPerUserPerMinute, total: limits.logLinesPerMinute)
        }
        if let summary { logger.warning("\(summary)") }
        if allowed { logger.log(level: level, "\(line())") }
    }

    /// Idle: no connection open and none for `idle`.
    func isIdle(for idle: TimeAmount) -> Bool {
        lock.withLock { connections.used == 0 && NIODeadline.now() - lastActivity >= idle }
    }
}

/// The log lines callers other than root may cause in a minute: `perUser` per charged uid and
/// `total` in all; the rest are counted, and the first line after the minute is preceded by
/// one summary (nothing an attacker sends yields more than total + 1 lines a minute).
struct LogBudget {
    private var windowStart: Int64 = 0
    private var spent: [UInt32: Int] = [:]
    private var suppressed: [UInt32: Int] = [:]
    private var total = 0

    mutating func spend(uid: UInt32, now: Int64, perUser: Int, total limit: Int) -> (allowed: Bool, summary: String?) {
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

func monotonicSeconds() -> Int64 {
    var t = timespec()
    clock_gettime(CLOCK_MONOTONIC, &t)
    return Int64(t.tv_sec)
}

/// Which user a uid in a subordinate range belongs to (/etc/subuid: `owner:first:count`, owner a
/// name or a uid): a user with newuidmap (rootless containers) appears to the daemon as many
/// uids, and each is charged to that user. Re-read when the file changes (inode, size, mtime).
final class SubordinateIDs: @unchecked Sendable {
    static let shared = SubordinateIDs(path: "/etc/subuid")
    let path: String
    private let lock = NIOLock()
    private var stamp: (ino_t, off_t, Int, Int) = (0, -1, 0, 0)
    private var ranges: [(first: UInt32, count: UInt32, owner: UInt32)] = []

    init(path: String) { self.path = path }

    func owner(of uid: UInt32) -> UInt32? {
        lock.withLock {
            reloadIfChanged()
            for r in ranges where uid >= r.first && UInt64(uid) < UInt64(r.first) + UInt64(r.count) { return r.owner }
            return nil
        }
    }

    private func reloadIfChanged() {
        var st = stat()
        guard stat(path, &st) == 0 else { ranges = []; stamp = (0, -1, 0, 0); return }
        let now = (st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec)
        guard now != stamp else { return }
        stamp = now
        ranges = []
        let fd = open(path, O_RDONLY | O_CLOEXEC)
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

/// One connection: one request frame in, one reply out, then closed.
final class RequestHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let state: ServerState
    private var received: [UInt8] = []
    private var expected: Int? = nil
    private var peer: PeerCred? = nil
    /// Whom this connection's share of the limits is charged to (`chargedUID`).
    private var charged: UInt32 = 0
    private var admitted = false
    private var answered = false
    private var timeout: Scheduled<Void>? = nil

    init(state: ServerState) { self.state = state }

    func channelActive(context: ChannelHandlerContext) {
        let channel = context.channel
        timeout = context.eventLoop.scheduleTask(in: state.limits.requestTimeout) {
            channel.close(promise: nil)
        }
        // The caller's credentials, from the kernel.
        guard let provider = channel as? SocketOptionProvider else { channel.close(promise: nil); return }
        let future: EventLoopFuture<PeerCred> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
        future.whenComplete { result in
            switch result {
            case .success(let cred):
                self.peer = cred
                guard channel.isActive else { return }  // gone already: nothing to count
                self.charged = Self.chargedUID(cred)
                if self.state.admit(uid: self.charged) {
                    self.admitted = true
                    self.process(context: context)  // a request that arrived with the connection
                } else {
                    self.state.log(.warning, uid: self.charged,
                                   "refused a connection from uid \(cred.uid) pid \(cred.pid) (charged to uid \(self.charged)): too many open connections")
                    channel.close(promise: nil)
                }
            case .failure:
                channel.close(promise: nil)
            }
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timeout?.cancel()
        if admitted { state.release(uid: charged) }
        admitted = false
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        guard !answered else { return }
        let limit = expected ?? DaemonProtocol.headerSize
        // Never hold more than one frame: bytes beyond it are a protocol error.
        let room = max(0, (expected ?? DaemonProtocol.maxFrameSize) - received.count)
        guard buffer.readableBytes <= room, let bytes = buffer.readBytes(length: buffer.readableBytes) else {
            malformed(context, "more bytes than one request")
            return
        }
        received += bytes
        if expected == nil && received.count >= limit {
            let header = received.prefix(DaemonProtocol.headerSize)
            guard let total = DaemonProtocol.frameLength(header: header, reply: false)
                    ?? DaemonProtocol.adminFrameLength(header: header, reply: false) else {
                malformed(context, "not a request")
                return
            }
            expected = total
            if received.count > total { malformed(context, "more bytes than one request"); return }
        }
        process(context: context)
    }

    private func malformed(_ context: ChannelHandlerContext, _ why: String) {
        answered = true
        wipeReceived()
        // Before the caller is known it is charged to no uid (never root's unlimited share).
        state.log(.warning, uid: admitted ? charged : UInt32.max, "malformed request from uid \(peer.map { String($0.uid) } ?? "?"): \(why)")
        context.close(promise: nil)
    }

    private func wipeReceived() {
        for i in received.indices { received[i] = 0 }
        received = []
    }

    /// Whom a connection's share of the limits (connections, queue) is charged to: the uid the
    /// kernel reports, except that a set-uid root program — totp-enroll, su, sudo — is charged
    /// to the user who ran it (its real uid, from /proc), so running one in a loop gets that
    /// user's share, not root's unbounded one (docs/ARCHITECTURE.md, section 4.15). Who may do what
    /// still goes by the uid the kernel reports. Unreadable (the process is gone): root.
    static func chargedUID(_ cred: PeerCred) -> UInt32 {
        let real = realUID(cred)
        return real == 0 ? 0 : SubordinateIDs.shared.owner(of: real) ?? real
    }

    /// The uid the kernel reports, or for root the real uid of the process (from /proc).
    static func realUID(_ cred: PeerCred) -> UInt32 {
        guard cred.uid == 0, cred.pid > 0 else { return cred.uid }
        let fd = open("/proc/\(cred.pid)/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = read(fd, &buffer, buffer.count)
        guard n > 0 else { return 0 }
        // "Uid:\treal\teffective\tsaved\tfilesystem"
        for line in buffer[0..<min(n, buffer.count)].split(separator: 0x0A) where line.starts(with: Array("Uid:".utf8)) {
            guard let real = line.dropFirst(4).split(whereSeparator: { $0 == 0x09 || $0 == 0x20 }).first else { return 0 }
            return UInt32(String(decoding: real, as: UTF8.self)) ?? 0
        }
        return 0
    }

    /// Once the whole frame is in and the caller is known: the work on a worker thread, the
    /// reply back on the event loop.
    private func process(context: ChannelHandlerContext) {
        guard !answered, admitted, let peer, let expected, received.count == expected else { return }
        answered = true
        timeout?.cancel()
        let frame = received
        wipeReceived()
        let channel = context.channel
        let state = self.state
        let admin = DaemonProtocol.adminFrameLength(header: frame.prefix(DaemonProtocol.headerSize), reply: false) != nil
        let charged = self.charged
        guard state.enqueue(uid: charged) else {
            state.log(.warning, uid: charged, "busy: refused a request from uid \(peer.uid) (charged to uid \(charged))")
            send(channel, admin ? AdminReply.failed(.daemon("busy")).encoded() : DaemonReply.outcome(.failed(.daemon("busy"))).encoded())
            return
        }
        let credentials = PeerCredentials(uid: peer.uid, pid: UInt32(bitPattern: peer.pid))
        let account = Self.account(of: frame, admin: admin)
        let eventLoop = context.eventLoop
        state.serialize(account: account) {
            let work = state.pool.runIfActive(eventLoop: eventLoop) { () -> [UInt8] in
                defer { state.dequeue(uid: charged) }
                var frame = frame
                defer { for i in frame.indices { frame[i] = 0 } }
                return admin ? Self.answerAdmin(frame, credentials, channel: channel, charged: charged, state: state)
                             : Self.answer(frame, credentials, charged: charged, state: state)
            }
            work.whenComplete { result in
                state.finished(account: account)
                switch result {
                case .success(let bytes): self.send(channel, bytes)
                case .failure:
                    self.send(channel, admin ? AdminReply.failed(.daemon("shutting down")).encoded()
                                             : DaemonReply.outcome(.failed(.daemon("shutting down"))).encoded())
                }
            }
        }
    }

    /// The account a request is about, to give each account at most one worker at a time
    /// (`ServerState.serialize`); an undecodable request or an account listing: the empty name.
    static func account(of frame: [UInt8], admin: Bool) -> [UInt8] {
        if admin { return ((try? AdminRequest.decode(frame))?.user) ?? [] }
        return (try? DaemonRequest.decode(frame))?.user ?? []
    }

    /// A module request on a worker: decoded, answered, logged.
    static func answer(_ frame: [UInt8], _ credentials: PeerCredentials, charged: UInt32, state: ServerState) -> [UInt8] {
        let request: DaemonRequest
        do {
            request = try DaemonRequest.decode(frame)
        } catch {
            state.log(.warning, uid: charged, "malformed request from uid \(credentials.uid) pid \(credentials.pid)")
            return DaemonReply.outcome(.failed(.malformed("request"))).encoded()
        }
        let (reply, line) = state.handle(request, credentials, Int64(time(nil)))
        if case .outcome(.failed(.daemon)) = reply {
            state.log(.error, uid: charged, line.string)
        } else {
            state.log(.info, uid: charged, line.string)
        }
        return reply.encoded()
    }

    /// An enrolment-management request (totp-enroll) on a worker.
    static func answerAdmin(_ frame: [UInt8], _ credentials: PeerCredentials, channel: Channel, charged: UInt32,
                            state: ServerState) -> [UInt8] {
        // The caller gave up while this waited for a worker (its deadline is 5 s, queue
        // included): a change made now would be reported to no one, and totp-enroll has
        // already told its user that it failed. Do nothing, as it said.
        guard channel.isActive else {
            state.log(.warning, uid: charged,
                      "dropped an admin request from uid \(credentials.uid) pid \(credentials.pid): the caller had gone before a worker was free")
            return AdminReply.failed(.daemon("the caller had gone")).encoded()
        }
        let request: AdminRequest
        do {
            request = try AdminRequest.decode(frame)
        } catch {
            state.log(.warning, uid: charged, "malformed admin request from uid \(credentials.uid) pid \(credentials.pid)")
            return AdminReply.failed(.malformed("admin request")).encoded()
        }
        let (reply, line) = state.handleAdmin(request, credentials, Int64(time(nil)))
        switch reply {
        case .failed(.daemon), .refused: state.log(.warning, uid: charged, line.string)
        default: state.log(.notice, uid: charged, line.string)
        }
        return reply.encoded()
    }

    private func send(_ channel: Channel, _ bytes: [UInt8]) {
        var buffer = channel.allocator.buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        channel.writeAndFlush(buffer).whenComplete { _ in channel.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}
