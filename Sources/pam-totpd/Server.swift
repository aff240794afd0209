import CLibc
import MFADaemon
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import Synchronization

/// `SO_PEERCRED` as the kernel fills it (struct ucred: pid_t, uid_t, gid_t).
struct PeerCred: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

/// One request answered: DaemonService.handle on the backend the configuration names.
typealias RequestHandlerFunction = (DaemonRequest, PeerCredentials, Int64) -> Answered
/// One enrolment-management request (totp-enroll, AdminProtocol): DaemonService.handleAdmin.
typealias AdminHandlerFunction = (AdminRequest, PeerCredentials, Int64) -> (reply: AdminReply, log: Message)

/// Shared by every connection and worker: the counters, the service and the worker pool.
final class ServerState: @unchecked Sendable {
    let limits: Limits
    let handle: RequestHandlerFunction
    let handleAdmin: AdminHandlerFunction
    let pool: WorkerPool
    let logger: Logger
    /// Run by the event loop after each wake-up (at least every 10 s).
    let housekeeping: @Sendable () -> Void
    private struct Counters {
        var connections: Quota
        var queue: Quota
        /// Accounts a worker is answering a request for, and the requests waiting for each.
        var busyAccounts: [[UInt8]: [@Sendable () -> Void]] = [:]
        var logBudget = LogBudget()
    }
    private let counters: Locked<Counters>

    init(limits: Limits, handle: @escaping RequestHandlerFunction, handleAdmin: @escaping AdminHandlerFunction,
         pool: WorkerPool, logger: Logger, housekeeping: @escaping @Sendable () -> Void = {}) {
        self.housekeeping = housekeeping
        self.limits = limits
        self.handle = handle
        self.handleAdmin = handleAdmin
        self.pool = pool
        self.logger = logger
        counters = Locked(Counters(
            connections: Quota(total: limits.maxConnections, forRootOnly: limits.connectionsForRootOnly, perUser: limits.maxConnectionsPerUser,
                               larger: limits.trustedUIDs, share: limits.trustedShare),
            queue: Quota(total: limits.maxQueued, forRootOnly: limits.queuedForRootOnly, perUser: limits.maxQueuedPerUser,
                         larger: limits.trustedUIDs, share: limits.trustedShare)))
    }

    /// A new connection from `uid`: false if it is over a limit (then it is closed at once).
    func admit(uid: UInt32) -> Bool { counters.withLock { $0.connections.take(uid: uid) } }

    func release(uid: UInt32) { counters.withLock { $0.connections.give(uid: uid) } }

    /// Idle: no connection open and no request with a worker (one whose caller has hung up
    /// is still finished before the daemon exits).
    var isIdle: Bool { counters.withLock { $0.connections.used == 0 && $0.queue.used == 0 } }

    func enqueue(uid: UInt32) -> Bool { counters.withLock { $0.queue.take(uid: uid) } }

    func dequeue(uid: UInt32) { counters.withLock { $0.queue.give(uid: uid) } }

    /// Runs `start` now if no worker is answering a request for `account`, else after the
    /// ones before it; `start` must call `finished(account:)` when its work is done. One
    /// account's stuck store lock (a stopped su holding it) then delays only that account.
    func serialize(account: [UInt8], _ start: @escaping @Sendable () -> Void) {
        let now: Bool = counters.withLock {
            if $0.busyAccounts[account] != nil {
                $0.busyAccounts[account, default: []].append(start)
                return false
            }
            $0.busyAccounts[account] = []
            return true
        }
        if now { start() }
    }

    func finished(account: [UInt8]) {
        let next: (@Sendable () -> Void)? = counters.withLock {
            guard var waiting = $0.busyAccounts[account], !waiting.isEmpty else {
                $0.busyAccounts[account] = nil
                return nil
            }
            let first = waiting.removeFirst()
            $0.busyAccounts[account] = waiting
            return first
        }
        next?()
    }

    /// Logs a line a caller charged to `uid` caused: root's always; any other uid's within
    /// its budget (`LogBudget`), with one summary line for what a minute suppressed.
    func log(_ level: Logger.Level, uid: UInt32, _ line: @autoclosure () -> String) {
        if mayLog(uid: uid) { logger.log(level: level, line()) }
    }

    /// The same for a line already in bytes (a request's, DaemonService).
    func log(_ level: Logger.Level, uid: UInt32, message line: Message) {
        if mayLog(uid: uid) { logger.log(level: level, line) }
    }

    /// Whether `uid`'s budget allows one more line; logs the summary of what was suppressed first.
    private func mayLog(uid: UInt32) -> Bool {
        guard uid != 0 else { return true }
        let (allowed, summary) = counters.withLock {
            $0.logBudget.spend(uid: uid, now: monotonicSeconds(),
                               perUser: limits.logLinesPerUserPerMinute * (limits.trustedUIDs.contains(uid) ? limits.trustedShare : 1),
                               total: limits.logLinesPerMinute)
        }
        if let summary { logger.warning(summary) }
        return allowed
    }
}

func monotonicSeconds() -> Int64 { monotonicMilliseconds() / 1000 }


/// The worker threads: store operations (file I/O, fsync, a per-user lock of up to 5 s, a
/// database round trip) run here, never on the thread that accepts and reads.
final class WorkerPool: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var ready = pthread_cond_t()
    /// Guarded by `mutex`. A job is removed when a worker takes it (the list is at most the
    /// queue's limit long), so a finished job's request and connection are freed at once.
    private var jobs: [@Sendable () -> Void] = []

    /// Starts the threads; throws if none could be started (no request would ever be answered).
    init(threads: Int) throws(DaemonError) {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&ready, nil)
        var started = 0
        for _ in 0..<max(1, threads) {
            var thread = pthread_t()
            let box = Unmanaged.passRetained(self).toOpaque()
            let made = pthread_create(&thread, nil, { raw in
                guard let raw else { return nil }
                Unmanaged<WorkerPool>.fromOpaque(raw).takeRetainedValue().work()
            }, box)
            if made == 0 {
                pthread_detach(thread)
                started += 1
            } else {
                Unmanaged<WorkerPool>.fromOpaque(box).release()
            }
        }
        guard started > 0 else { throw DaemonError("cannot start a worker thread") }
    }

    /// Runs `job` on a worker as soon as one is free, in the order given.
    func run(_ job: @escaping @Sendable () -> Void) {
        pthread_mutex_lock(&mutex)
        jobs.append(job)
        pthread_cond_signal(&ready)
        pthread_mutex_unlock(&mutex)
    }

    private func work() -> Never {
        while true {
            pthread_mutex_lock(&mutex)
            while jobs.isEmpty { pthread_cond_wait(&ready, &mutex) }
            let job = jobs.removeFirst()
            pthread_mutex_unlock(&mutex)
            job()
        }
    }
}

/// One connection: one request frame in, one reply out, then closed. Owned by the server's
/// thread; a worker only reads `isClosed` and hands its reply back through `Server.complete`.
final class Connection: @unchecked Sendable {
    let fd: Int32
    let peer: PeerCred
    /// Whom this connection's share of the limits is charged to (`chargedUID`).
    let charged: UInt32
    /// Tells this connection from an earlier one with the same descriptor.
    let serial: UInt64
    var received: [UInt8] = []
    var expected: Int? = nil
    /// An admin request (totp-enroll), known from the header with `expected`.
    var admin = false
    /// Set once the request is complete (or refused): later bytes are ignored.
    var answered = false
    var reply: [UInt8] = []
    var written = 0
    private let closed = Atomic<Bool>(false)

    init(fd: Int32, peer: PeerCred, charged: UInt32, serial: UInt64) {
        self.fd = fd
        self.peer = peer
        self.charged = charged
        self.serial = serial
    }

    /// The caller is gone (it hung up, or its deadline passed): nothing more is sent.
    var isClosed: Bool { closed.load(ordering: .acquiring) }
    func markClosed() { closed.store(true, ordering: .releasing) }

    func wipeReceived() {
        for i in received.indices { received[i] = 0 }
        received = []
    }
}

/// The listening socket and its connections, served by one thread with poll(2): accept, the
/// caller's credentials from the kernel, reading one frame, the work handed to the pool, the
/// reply written back. (SwiftNIO did this before, at about 140,000 instructions a request and
/// 2.3 MB of the program: docs/benchmarks.md, "Daemon".)
final class Server: @unchecked Sendable {
    let state: ServerState
    let listener: Int32
    /// Written by a worker when a reply is ready; the server thread wakes and sends it.
    private let wake: Int32
    private let done = Locked<[(Connection, [UInt8])]>([])
    private var connections: [Int32: Connection] = [:]
    /// In order of their deadlines (every connection gets the same time): the oldest first.
    /// Small entries, not the connections: one that is closed is freed at once, whatever
    /// still waits before it (an always-unfinished request kept every connection alive).
    private var deadlines: [(deadline: Int64, fd: Int32, serial: UInt64)] = []
    private var deadlinesHead = 0
    private var serials: UInt64 = 0
    private var lastActivity = monotonicMilliseconds()
    /// One read's bytes (wiped after each read).
    private var readBuffer = [UInt8](repeating: 0, count: 2048)
    /// accept(2) ran out of descriptors (EMFILE, or ENFILE for the whole system): the listener
    /// is not polled until this monotonic time, or until a connection closes.
    private var acceptPausedUntil: Int64 = 0

    init(state: ServerState, listener: Int32) throws(DaemonError) {
        self.state = state
        self.listener = listener
        wake = clibc_eventfd_nonblocking()
        guard wake >= 0 else { throw DaemonError("cannot create an eventfd: \(Errno.current.text.string)") }
        _ = clibc_fcntl_int(listener, F_SETFL, clibc_fcntl_int(listener, F_GETFL, 0) | O_NONBLOCK)
    }

    /// Serves until idle for `idleExitSeconds` (socket activation), else for ever; throws if
    /// poll(2) itself fails.
    func run() throws(DaemonError) {
        var fds: [pollfd] = []
        var polled: [Connection?] = []
        while true {
            fds.removeAll(keepingCapacity: true)
            polled.removeAll(keepingCapacity: true)
            fds.append(pollfd(fd: wake, events: Int16(POLLIN), revents: 0))
            polled.append(nil)
            let now = monotonicMilliseconds()
            if now >= acceptPausedUntil {
                fds.append(pollfd(fd: listener, events: Int16(POLLIN), revents: 0))
                polled.append(nil)
            }
            for c in connections.values {
                // A connection whose request is with a worker is still read: its hang-up is
                // noticed (an admin request whose caller has gone is not carried out).
                fds.append(pollfd(fd: c.fd, events: Int16(c.reply.isEmpty ? POLLIN : POLLOUT), revents: 0))
                polled.append(c)
            }
            var timeout: Int64 = 10_000
            if let (_, first) = nextDeadline() { timeout = min(timeout, max(0, first - now)) }
            if now < acceptPausedUntil { timeout = min(timeout, acceptPausedUntil - now) }
            let n = poll(&fds, nfds_t(fds.count), Int32(timeout))
            if n < 0 && clibc_errno() != EINTR { throw DaemonError("poll failed: \(Errno.current.text.string)") }
            if n > 0 {
                for (i, p) in fds.enumerated() where p.revents != 0 {
                    if let c = polled[i] {
                        if connections[c.fd] === c { service(c, events: p.revents) }
                    } else if p.fd == wake {
                        drainCompletions()
                    } else {
                        acceptAll()
                    }
                }
            }
            expire(now: monotonicMilliseconds())
            state.housekeeping()
            if let idle = state.limits.idleExitSeconds, connections.isEmpty, state.isIdle,
               monotonicMilliseconds() - lastActivity >= idle * 1000 {
                state.logger.info("idle for a minute: exiting (systemd starts pam-totpd again on the next connection)")
                return
            }
        }
    }

    /// The open, unfinished connection with the nearest deadline, and that deadline.
    private func nextDeadline() -> (Connection, Int64)? {
        // The entries before the head are done with: dropped once they are half the list.
        if deadlinesHead >= 64 && deadlinesHead * 2 >= deadlines.count {
            deadlines.removeFirst(deadlinesHead)
            deadlinesHead = 0
        }
        while deadlinesHead < deadlines.count {
            let entry = deadlines[deadlinesHead]
            if let c = connections[entry.fd], c.serial == entry.serial, !c.answered { return (c, entry.deadline) }
            deadlinesHead += 1
        }
        deadlines.removeAll(keepingCapacity: true)
        deadlinesHead = 0
        return nil
    }

    /// Closes every connection whose request is not complete by its deadline.
    private func expire(now: Int64) {
        while let (c, deadline) = nextDeadline(), deadline <= now {
            deadlinesHead += 1
            close(c)
        }
    }

    /// Accepts what is waiting, at most 16 (then the connections already open are read: a
    /// flood of connections waiting in the backlog does not starve requests already in).
    private func acceptAll() {
        for _ in 0..<16 {
            let fd = clibc_accept_nonblocking(listener)
            if fd < 0 {
                let e = clibc_errno()
                if e == EMFILE || e == ENFILE {
                    // Tried again in 250 ms, or as soon as a connection closes.
                    acceptPausedUntil = monotonicMilliseconds() + 250
                    state.logger.warning("out of file descriptors: accepting again in 250 ms or when a connection closes")
                }
                return
            }
            lastActivity = monotonicMilliseconds()
            // The caller's credentials, from the kernel.
            var cred = PeerCred()
            var size = socklen_t(MemoryLayout<PeerCred>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) == 0 else { CLibc.close(fd); continue }
            let charged = Self.chargedUID(cred)
            guard state.admit(uid: charged) else {
                state.log(.warning, uid: charged,
                          "refused a connection from uid \(cred.uid) pid \(cred.pid) (charged to uid \(charged)): too many open connections")
                CLibc.close(fd)
                continue
            }
            serials += 1
            let deadline = monotonicMilliseconds() + state.limits.requestTimeoutMilliseconds
            let c = Connection(fd: fd, peer: cred, charged: charged, serial: serials)
            connections[fd] = c
            deadlines.append((deadline, fd, serials))
        }
    }

    private func service(_ c: Connection, events: Int16) {
        if !c.reply.isEmpty {
            if events & Int16(POLLOUT | POLLERR | POLLHUP) != 0 { write(c) }
            return
        }
        let n = readBuffer.withUnsafeMutableBytes { read(c.fd, $0.baseAddress, $0.count) }
        // What was read may be an answer: not left in the buffer for the next read.
        defer { for i in 0..<max(0, n) { readBuffer[i] = 0 } }
        if n < 0 {
            if clibc_errno() == EAGAIN || clibc_errno() == EINTR { return }
            close(c)
            return
        }
        if n == 0 { close(c); return }  // the caller hung up
        if c.answered { return }  // bytes after the request (or after a refusal): ignored
        // Never hold more than one frame: bytes beyond it are a protocol error.
        let room = max(0, (c.expected ?? DaemonProtocol.maxFrameSize) - c.received.count)
        guard n <= room else { malformed(c, "more bytes than one request"); return }
        c.received += readBuffer[0..<n]
        if c.expected == nil && c.received.count >= DaemonProtocol.headerSize {
            let header = c.received.prefix(DaemonProtocol.headerSize)
            if let total = DaemonProtocol.frameLength(header: header, reply: false) {
                c.expected = total
            } else if let total = DaemonProtocol.adminFrameLength(header: header, reply: false) {
                c.expected = total
                c.admin = true
            } else {
                malformed(c, "not a request")
                return
            }
            if let total = c.expected, c.received.count > total { malformed(c, "more bytes than one request"); return }
        }
        if let expected = c.expected, c.received.count == expected { dispatch(c) }
    }

    private func malformed(_ c: Connection, _ why: String) {
        c.answered = true
        c.wipeReceived()
        state.log(.warning, uid: c.charged, "malformed request from uid \(c.peer.uid): \(why)")
        close(c)
    }

    /// The whole frame is in: the work on a worker thread, the reply back on this one.
    private func dispatch(_ c: Connection) {
        c.answered = true
        var frame = c.received
        c.wipeReceived()
        defer { for i in frame.indices { frame[i] = 0 } }
        let state = self.state
        let admin = c.admin
        let charged = c.charged
        guard state.enqueue(uid: charged) else {
            state.log(.warning, uid: charged, "busy: refused a request from uid \(c.peer.uid) (charged to uid \(charged))")
            send(c, admin ? AdminReply.failed(.daemon("busy")).encoded() : DaemonReply.outcome(.failed(.daemon("busy"))).encoded())
            return
        }
        let credentials = PeerCredentials(uid: c.peer.uid, pid: UInt32(bitPattern: c.peer.pid))
        // Decoded once, here: the account it is about orders the work (`serialize`).
        let request = admin ? nil : try? DaemonRequest.decode(frame)
        let adminRequest = admin ? try? AdminRequest.decode(frame) : nil
        let account = (admin ? adminRequest?.user : request?.user) ?? []
        state.serialize(account: account) { [self] in
            state.pool.run { [self] in
                var later: (() -> [UInt8])? = nil
                var bytes: [UInt8]
                if admin {
                    bytes = Self.answerAdmin(adminRequest, credentials, connection: c, charged: charged, state: state)
                } else {
                    (bytes, later) = Self.answer(request, credentials, charged: charged, state: state)
                }
                // The account's next request may start now; a code's delivery (up to 10 s)
                // runs after that, on this worker (its caller's share of the queue still held).
                state.finished(account: account)
                if let later { bytes = later() }
                state.dequeue(uid: charged)
                complete(c, bytes)
            }
        }
    }

    /// From a worker: the reply for `c`, sent by the server's thread.
    private func complete(_ c: Connection, _ bytes: [UInt8]) {
        done.withLock { $0.append((c, bytes)) }
        var one: UInt64 = 1
        _ = CLibc.write(wake, &one, 8)
    }

    private func drainCompletions() {
        var count: UInt64 = 0
        _ = read(wake, &count, 8)
        let ready = done.withLock { list -> [(Connection, [UInt8])] in
            let all = list
            list.removeAll()
            return all
        }
        for (c, bytes) in ready where connections[c.fd] === c { send(c, bytes) }
    }

    private func send(_ c: Connection, _ bytes: [UInt8]) {
        c.reply = bytes
        c.written = 0
        write(c)
    }

    private func write(_ c: Connection) {
        while c.written < c.reply.count {
            // MSG_NOSIGNAL: a caller that has hung up is EPIPE here, not a SIGPIPE that ends the daemon.
            let n = c.reply.withUnsafeBytes { CLibc.send(c.fd, $0.baseAddress.map { $0 + c.written }, $0.count - c.written, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if clibc_errno() == EINTR { continue }
                if clibc_errno() == EAGAIN { return }  // the rest when the socket has room
                break
            }
            c.written += n
        }
        close(c)
    }

    private func close(_ c: Connection) {
        guard connections[c.fd] === c else { return }
        connections[c.fd] = nil
        c.markClosed()
        c.wipeReceived()
        CLibc.close(c.fd)
        state.release(uid: c.charged)
        lastActivity = monotonicMilliseconds()
        acceptPausedUntil = 0
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
        let fd = clibc_open("/proc/\(cred.pid)/status", O_RDONLY | O_CLOEXEC, 0)
        guard fd >= 0 else { return 0 }
        defer { CLibc.close(fd) }
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

    /// A module request on a worker (nil: it did not decode): answered, logged; a code's
    /// delivery comes back as `later`, to run once the account is let go.
    static func answer(_ request: DaemonRequest?, _ credentials: PeerCredentials, charged: UInt32,
                       state: ServerState) -> (bytes: [UInt8], later: (() -> [UInt8])?) {
        guard let request else {
            state.log(.warning, uid: charged, "malformed request from uid \(credentials.uid) pid \(credentials.pid)")
            return (DaemonReply.outcome(.failed(.malformed("request"))).encoded(), nil)
        }
        let answered = state.handle(request, credentials, Int64(time(nil)))
        if request.operation == .authenticate {
            // The answers are codes the user typed (a sent one too), decoded for this request
            // alone: wiped before they are freed (issue 36).
            wipeInPlace(request.answer)
            wipeInPlace(request.previous)
        }
        // Enrolment at first login: the new factor's secret, where every copy made of it shares it.
        wipeInPlace(request.newSecret)
        func logged(_ reply: DaemonReply, _ line: Message) -> [UInt8] {
            if case .outcome(.failed(.daemon)) = reply {
                state.log(.error, uid: charged, message: line)
            } else {
                state.log(.info, uid: charged, message: line)
            }
            return reply.encoded()
        }
        if let deliver = answered.deliver {
            return ([], {
                let (reply, line) = deliver()
                return logged(reply, line)
            })
        }
        return (logged(answered.reply, answered.log), nil)
    }

    /// An enrolment-management request (totp-enroll) on a worker.
    static func answerAdmin(_ request: AdminRequest?, _ credentials: PeerCredentials, connection: Connection, charged: UInt32,
                            state: ServerState) -> [UInt8] {
        // The caller gave up while this waited for a worker (its deadline is 5 s, queue
        // included): a change made now would be reported to no one, and totp-enroll has
        // already told its user that it failed. Do nothing, as it said.
        guard !connection.isClosed else {
            state.log(.warning, uid: charged,
                      "dropped an admin request from uid \(credentials.uid) pid \(credentials.pid): the caller had gone before a worker was free")
            return AdminReply.failed(.daemon("the caller had gone")).encoded()
        }
        guard let request else {
            state.log(.warning, uid: charged, "malformed admin request from uid \(credentials.uid) pid \(credentials.pid)")
            return AdminReply.failed(.malformed("admin request")).encoded()
        }
        let (reply, line) = state.handleAdmin(request, credentials, Int64(time(nil)))
        // The code typed back at an enrolment, decoded for this request alone (issue 36).
        if case .confirmEnrolment(_, _, _, _, let answer) = request { wipeInPlace(answer) }
        switch reply {
        case .failed(.daemon), .refused: state.log(.warning, uid: charged, message: line)
        default: state.log(.notice, uid: charged, message: line)
        }
        return reply.encoded()
    }
}

func monotonicMilliseconds() -> Int64 {
    var t = timespec()
    clock_gettime(CLOCK_MONOTONIC, &t)
    return Int64(t.tv_sec) * 1000 + Int64(t.tv_nsec) / 1_000_000
}
