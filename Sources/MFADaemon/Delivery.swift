import CLibc
import CSpawn
import MFASystem

// Sending a code (issue 19, "Delivery"): pam-totpd runs the configured program with no
// argument, the destination in its environment (`PAM_TOTP_DESTINATION`, and `PAM_TOTP_KIND`)
// and the message on its standard input, as an unprivileged system user, and waits a bounded
// time. Never the destination in argv: /proc/PID/cmdline is every local user's to read,
// /proc/PID/environ only the process's own uid's and root's (issue 36). The fork and the child's side are C (Sources/CSpawn: the daemon is
// multi-threaded, so nothing but system calls may run between fork and execve); this is the
// parent's side: the checks, the message in, the output out, the deadline, the verdict.
//
// The message holds the code: it is written to the program and nowhere else (not into the
// result, not into a log line, not into an error). What the result carries is the program's own
// output, escaped for a log line.

/// How one run of a sender ended, and what it printed.
public struct DeliveryResult: Equatable, Sendable {
    public enum Outcome: Equatable, Sendable {
        /// The program exited with status 0.
        case sent
        /// The program exited with another status. -1: its status could not be collected
        /// (another waitpid in the process took it).
        case failed(exitStatus: Int32)
        /// A signal ended the program (not the time-out's: that is `timedOut`).
        case killed(signal: Int32)
        /// The program was still running at the deadline: its process group was killed
        /// (SIGKILL) and the program reaped.
        case timedOut
        /// The program never ran: refused before the fork, or a step before execve failed.
        case couldNotStart(DeliveryStartFailure)
    }

    public let outcome: Outcome
    /// The program's standard output and standard error (one pipe, in the order written),
    /// escaped for a log line: printable UTF-8 kept; `\\`, `\n`, `\t`, `\r`; any other control
    /// or invalid byte `\xHH`; other unprintable code points `\u{HHHH}`. At most
    /// `DeliveryResult.outputLimit` bytes of that text, then " [truncated]" when there was more.
    public let output: Message

    /// The escaped output kept, in bytes (the marker comes after).
    public static let outputLimit = 2000

    public init(outcome: Outcome, output: Message) {
        self.outcome = outcome
        self.output = output
    }

    public var isSent: Bool { outcome == .sent }

    /// What happened, for the log line ("exited with status 3"); the output is separate.
    public var summary: Message {
        switch outcome {
        case .sent: return "sent"
        case .failed(let status):
            return status < 0 ? "ended with a status that could not be collected" : "exited with status " + decimal(status)
        case .killed(let signal): return "killed by signal " + decimal(signal)
        case .timedOut: return "timed out: killed with its process group"
        case .couldNotStart(let failure): return "could not start: " + failure.description
        }
    }
}

/// Why a sender did not run.
public enum DeliveryStartFailure: Equatable, Sendable {
    /// The program is not an absolute path (or has a NUL byte, or is longer than PATH_MAX).
    case programNotAbsolute
    /// The program is not a regular file owned by root that only root may write (says which):
    /// whoever can change it would read every code it sends.
    case insecureProgram(Message)
    /// The destination is empty, over 320 bytes, starts with "-", or holds a space or control
    /// byte: it is one plain word, never an option (a sender may hand it to another program).
    case invalidDestination
    /// The kind is not 1 to 16 lowercase ASCII letters ("sms", "email").
    case invalidKind
    /// uid or gid 0 (root), or 4294967295 (which the set*id calls read as "unchanged").
    case invalidIdentity
    /// The time limit is not positive.
    case invalidTimeout
    /// A system call failed: `step` names it (the parent's, or the child's before execve).
    case system(step: Message, errno: Errno)

    public var description: Message {
        switch self {
        case .programNotAbsolute: return "the program must be an absolute path"
        case .insecureProgram(let why): return "the program " + why
        case .invalidDestination: return "the destination is not one plain word"
        case .invalidKind: return "the kind is not a plain name"
        case .invalidIdentity: return "a sender never runs as root (uid and gid must be another account's)"
        case .invalidTimeout: return "the time limit must be positive"
        case .system(let step, let errno): return step + ": " + errno.text + " (errno " + errno.number + ")"
        }
    }
}

/// Runs `program` (argv exactly that one: no argument) with `message` on its standard input,
/// then end of file, as `uid`/`gid` with no supplementary groups, and waits at most
/// `timeoutMilliseconds` (CLOCK_MONOTONIC) for it to exit.
///
/// The program must be an absolute path to a regular file owned by root and not writable by
/// group or others. It runs in a new session (its own process group), from /, with umask 022,
/// no core dumps, signals at their defaults and none blocked, the environment exactly
/// `PATH=/usr/local/bin:/usr/bin:/bin`, `LANG=C.UTF-8`, `PAM_TOTP_KIND=kind` and
/// `PAM_TOTP_DESTINATION=destination` (never on a command line: any local user reads a
/// process's arguments, only its own uid and root its environment), and descriptors 0 (a
/// stream socket), 1 and 2 (one pipe) only. It is killed (SIGKILL) if the calling thread dies first.
///
/// At the deadline the whole process group is killed and the program reaped: nothing is left
/// running and no zombie. A program that exits in time ends the run even if something it
/// started still holds the output open (an MTA's background delivery): what it left behind
/// and is not in the pipe yet is not waited for. A program that does not read its input is no
/// harm to the caller: the message goes over a socket with MSG_NOSIGNAL, so never SIGPIPE.
/// No signal handler is installed; signals are blocked in the calling thread only around fork.
public func deliver(program: [UInt8], kind: [UInt8], destination: [UInt8], message: [UInt8], uid: UInt32, gid: UInt32,
                    timeoutMilliseconds: Int) -> DeliveryResult {
    if let refused = deliveryRefusal(program: program, kind: kind, destination: destination, uid: uid, gid: gid,
                                     timeoutMilliseconds: timeoutMilliseconds) {
        return DeliveryResult(outcome: .couldNotStart(refused), output: Message([]))
    }
    let deadline = clibc_monotonic_ms() &+ Int64(min(timeoutMilliseconds, 86_400_000))

    var child = cspawn_child()
    var path = program
    path.append(0)
    var kindVariable: [UInt8] = []
    kindVariable.append(literal: "PAM_TOTP_KIND=")
    kindVariable += kind
    kindVariable.append(0)
    var destinationVariable: [UInt8] = []
    destinationVariable.append(literal: "PAM_TOTP_DESTINATION=")
    destinationVariable += destination
    destinationVariable.append(0)
    let started = path.withUnsafeBufferPointer { p in
        kindVariable.withUnsafeBufferPointer { k in
            destinationVariable.withUnsafeBufferPointer { d in cspawn_start(p.baseAddress, k.baseAddress, d.baseAddress, uid, gid, &child) }
        }
    }
    guard started == 0 else {
        let failure = DeliveryStartFailure.system(step: spawnStepName(Int(child.failed_step)), errno: Errno(child.failed_errno))
        return DeliveryResult(outcome: .couldNotStart(failure), output: Message([]))
    }
    var run = SenderRun(child: child, deadline: deadline)
    let outcome = run.wait(writing: message)
    // The program may have printed the message (and so the code): its raw output is wiped, and
    // the escaped copy is made in a buffer that never grows (issue 36).
    defer { wipe(&run.kept) }
    return DeliveryResult(outcome: outcome, output: Message(escapedProgramOutput(run.kept, complete: run.total == run.kept.count,
                                                                                  limit: DeliveryResult.outputLimit)))
}

/// The checks made before anything is started; nil when all pass.
func deliveryRefusal(program: [UInt8], kind: [UInt8], destination: [UInt8], uid: UInt32, gid: UInt32,
                     timeoutMilliseconds: Int) -> DeliveryStartFailure? {
    guard !destination.isEmpty, destination.count <= 320, destination.first != 0x2D,
          !destination.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else { return .invalidDestination }
    guard !kind.isEmpty, kind.count <= 16, kind.allSatisfy({ $0 >= 0x61 && $0 <= 0x7A }) else { return .invalidKind }
    guard uid != 0, gid != 0, uid != UInt32.max, gid != UInt32.max else { return .invalidIdentity }
    guard timeoutMilliseconds > 0 else { return .invalidTimeout }
    return checkSenderProgram(program)
}

/// What `deliver` checks of the program, for a configuration's `sms_command` and
/// `email_command` when they are read: an absolute path to a regular file owned by root and not
/// writable by group or others. nil: it may be run.
public func checkSenderProgram(_ program: [UInt8]) -> DeliveryStartFailure? {
    guard program.first == 0x2F, program.count < 4096, !program.contains(0) else { return .programNotAbsolute }
    // The file itself (symbolic links followed, as execve does): what a sender is must be root's
    // to decide. Checked by path, then run by path: only root can swap a root-owned file that
    // nobody else may write; its directories are the administrator's to keep the same way.
    var st = stat()
    var path = program
    path.append(0)
    let rc: Int32 = path.withUnsafeBufferPointer { p in
        p.withMemoryRebound(to: CChar.self) { c in
            guard let base = c.baseAddress else { return -1 }
            return stat(base, &st)
        }
    }
    guard rc == 0 else { return .system(step: "stat", errno: Errno.current) }
    guard st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG) else { return .insecureProgram("is not a regular file") }
    guard st.st_uid == 0 else { return .insecureProgram("is not owned by root") }
    guard st.st_mode & 0o022 == 0 else { return .insecureProgram("is writable by its group or by others") }
    return nil
}

func spawnStepName(_ step: Int) -> Message {
    switch step {
    case Int(CSPAWN_STEP_SOCKETPAIR): return "socketpair"
    case Int(CSPAWN_STEP_PIPE): return "pipe2"
    case Int(CSPAWN_STEP_FORK): return "fork"
    case Int(CSPAWN_STEP_SIGNALS): return "resetting signals"
    case Int(CSPAWN_STEP_SETSID): return "setsid"
    case Int(CSPAWN_STEP_DESCRIPTORS): return "setting up descriptors"
    case Int(CSPAWN_STEP_CHDIR): return "chdir /"
    case Int(CSPAWN_STEP_LIMITS): return "setrlimit RLIMIT_CORE"
    case Int(CSPAWN_STEP_SETGROUPS): return "setgroups"
    case Int(CSPAWN_STEP_SETGID): return "setresgid"
    case Int(CSPAWN_STEP_SETUID): return "setresuid"
    case Int(CSPAWN_STEP_VERIFY): return "checking the ids after the change"
    case Int(CSPAWN_STEP_PARENT_DEATH): return "PR_SET_PDEATHSIG"
    case Int(CSPAWN_STEP_EXEC): return "execve"
    case Int(CSPAWN_STEP_REPORT): return "reading the child's report"
    default: return "starting the program"
    }
}

/// One started program, from the message written to the program reaped.
struct SenderRun {
    let pid: Int32
    var input: Int32
    var output: Int32
    var pidFD: Int32
    let deadline: Int64
    /// The raw output kept (at most the limit: its escape is at least as long), and how much
    /// the program wrote in all.
    var kept: [UInt8] = []
    var total = 0

    init(child: cspawn_child, deadline: Int64) {
        pid = child.pid
        input = child.input_fd
        output = child.output_fd
        pidFD = child.pid_fd
        self.deadline = deadline
    }

    /// Writes `message`, reads the output and waits for the exit or the deadline; every
    /// descriptor closed and the program reaped on return.
    mutating func wait(writing message: [UInt8]) -> DeliveryResult.Outcome {
        var written = 0
        if message.isEmpty { closeInput() }
        var buffer = [UInt8](repeating: 0, count: 4096)
        defer { wipe(&buffer) }  // what the program printed passed through it
        kept.reserveCapacity(DeliveryResult.outputLimit)
        var outcome: DeliveryResult.Outcome? = nil
        while outcome == nil {
            // Without a pidfd (Linux before 5.3), the exit is looked for every 10 ms.
            if pidFD < 0, let ended = reap(blocking: false) {
                outcome = ended
                break
            }
            let now = clibc_monotonic_ms()
            if now >= deadline { break }
            let slice = pidFD < 0 ? min(deadline &- now, 10) : deadline &- now
            var fds = [pollfd](repeating: pollfd(fd: -1, events: 0, revents: 0), count: 3)
            if input >= 0 { fds[0] = pollfd(fd: input, events: Int16(POLLOUT), revents: 0) }
            if output >= 0 { fds[1] = pollfd(fd: output, events: Int16(POLLIN), revents: 0) }
            if pidFD >= 0 { fds[2] = pollfd(fd: pidFD, events: Int16(POLLIN), revents: 0) }
            let ready = fds.withUnsafeMutableBufferPointer { poll($0.baseAddress, 3, Int32(slice)) }
            if ready < 0 { continue }  // EINTR (anything else: the deadline still ends it)
            if ready == 0 { continue }
            if input >= 0, fds[0].revents != 0 {
                let n = message.withUnsafeBytes { m in
                    CLibc.send(input, m.baseAddress.map { $0 + written }, m.count &- written, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
                }
                if n > 0 {
                    written &+= n
                    if written >= message.count { closeInput() }
                } else if n < 0 {
                    let e = Errno.current
                    // EPIPE, ECONNRESET: it closed its input early. Its exit says how it went.
                    if e != .wouldBlock && e != .interrupted { closeInput() }
                }
            }
            if output >= 0, fds[1].revents != 0 { drainOutput(&buffer) }
            if pidFD >= 0, fds[2].revents != 0 {
                outcome = reap(blocking: false)
                if outcome == nil, fds[2].revents & Int16(POLLIN) == 0 {
                    // POLLERR/POLLNVAL on the pidfd: fall back to looking every 10 ms.
                    close(pidFD)
                    pidFD = -1
                }
            }
        }
        if outcome == nil {
            // The deadline: the whole group, while the unreaped program still holds its id.
            cspawn_kill_group(pid)
            _ = reap(blocking: true)
            outcome = .timedOut
        }
        // What it wrote before it ended is in the pipe; whatever it left running is not waited for.
        if output >= 0 { drainOutput(&buffer) }
        closeInput()
        if output >= 0 { close(output); output = -1 }
        if pidFD >= 0 { close(pidFD); pidFD = -1 }
        return outcome ?? .timedOut
    }

    /// nil while it runs (non-blocking); its outcome once reaped.
    func reap(blocking: Bool) -> DeliveryResult.Outcome? {
        var signaled: Int32 = 0, value: Int32 = 0
        switch cspawn_reap(pid, blocking ? 1 : 0, &signaled, &value) {
        case 0: return nil
        case 1:
            if signaled != 0 { return .killed(signal: value) }
            return value == 0 ? .sent : .failed(exitStatus: value)
        default: return .failed(exitStatus: -1)  // ECHILD: reaped elsewhere
        }
    }

    mutating func closeInput() {
        if input >= 0 { close(input) }
        input = -1
    }

    /// Reads what is there (non-blocking), keeping the first `outputLimit` bytes; end of file or
    /// an error closes it.
    mutating func drainOutput(_ buffer: inout [UInt8]) {
        while output >= 0 {
            let n = buffer.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
            if n > 0 {
                let room = DeliveryResult.outputLimit &- kept.count
                if room > 0 { kept.append(contentsOf: buffer[0..<min(room, n)]) }
                total &+= n
            } else if n < 0 && Errno.current == .interrupted {
                continue
            } else {
                if n == 0 || Errno.current != .wouldBlock {
                    close(output)
                    output = -1
                }
                return
            }
        }
    }
}

/// The program's output for a log line (see `DeliveryResult.output`): at most `limit` bytes of
/// escaped text, no escape or character cut in two, then " [truncated]" if anything was left
/// out (`complete` false: more was written than `raw` holds).
func escapedProgramOutput(_ raw: [UInt8], complete: Bool, limit: Int) -> [UInt8] {
    var out: [UInt8] = []
    // Never more than `limit` bytes and the marker: reserved whole, so no growth leaves a copy
    // of what the program printed (it may be the message) in freed memory.
    out.reserveCapacity(raw.isEmpty ? 12 : max(limit, 0) &+ 12)
    var piece: [UInt8] = []
    defer { wipe(&piece) }
    var i = 0
    var cut = !complete
    while i < raw.count {
        piece.removeAll(keepingCapacity: true)
        var length = 1
        let byte = raw[i]
        if let decoded = UTF8Scalar.decode(raw, at: i) {
            length = decoded.length
            switch decoded.scalar {
            case 0x5C: piece += [0x5C, 0x5C]
            case 0x0A: piece += [0x5C, 0x6E]
            case 0x09: piece += [0x5C, 0x74]
            case 0x0D: piece += [0x5C, 0x72]
            case let c where !UTF8Scalar.isPrintable(c):
                if c < 0x80 { TextEscape.appendByte(byte, to: &piece) } else { TextEscape.appendScalar(c, to: &piece) }
            default: piece += raw[i..<(i &+ length)]
            }
        } else {
            TextEscape.appendByte(byte, to: &piece)
        }
        if out.count &+ piece.count > limit {
            cut = true
            break
        }
        out += piece
        i &+= length
    }
    if cut { out.append(literal: " [truncated]") }
    return out
}
