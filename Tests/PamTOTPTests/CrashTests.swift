import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// Crash safety of the store: a writer process (`store-writer`, Tests/StoreWriter) that rewrites
/// a record and the state file in a loop is killed with SIGKILL at random points, hundreds of
/// times; after every kill the store must hold the old or the new record (never anything else),
/// a valid state whose sequence never goes backwards, no foreign files, and must still be
/// writable. Finally the real module authenticates against what the kills left behind.
///
/// SIGKILL tests a process crash, not a power cut: the page cache survives, so the fsync calls
/// are not exercised here. `testTornStateSlotKeepsThePreviousState` covers the torn slot a
/// power cut could leave.
final class CrashTests: XCTestCase {
    /// MFAError with its message as text (Message prints as bytes otherwise).
    static func text(_ error: Error) -> String {
        switch error as? MFAError {
        case .insecureStore(let m)?: return "insecureStore: " + m.string
        case .corruptRecord(let m)?: return "corruptRecord: " + m.string
        case .system(let operation, let e)?: return operation.string + " failed: errno \(e.rawValue)"
        default: return "\(error)"
        }
    }

    let user = "alice"
    var fixture: PAMFixture?
    /// The writer currently running, if any: tearDown kills and reaps it.
    var child: pid_t = 0
    var childOutput: Int32 = -1

    // Keep in sync with Tests/StoreWriter/main.swift.
    static let phoneSecret = Array("12345678901234567890".utf8)
    static let tabletSecret = [UInt8](repeating: 0x42, count: 32)

    static func recordA() throws -> UserRecord {
        UserRecord(factors: [try phone()])
    }

    static func recordB() throws -> UserRecord {
        UserRecord(factors: [try phone(),
                             try Factor(label: Array("tablet".utf8),
                                        parameters: try OTPParameters(algorithm: .sha256, digits: 8, period: 60),
                                        created: 1_700_000_001, secret: tabletSecret)])
    }

    static func phone() throws -> Factor {
        try Factor(label: Array("phone".utf8), parameters: .default, created: 1_700_000_000, secret: phoneSecret)
    }

    override func tearDown() {
        stopChild()
        fixture?.cleanup()
    }

    func stopChild() {
        if child > 0 {
            kill(child, SIGKILL)
            var status: Int32 = 0
            while waitpid(child, &status, 0) < 0 && errno == EINTR {}
            child = 0
        }
        if childOutput >= 0 { close(childOutput); childOutput = -1 }
    }

    /// The store-writer built with the tests: STORE_WRITER if set, else next to the running test
    /// binary (works for any --scratch-path), else .build/debug. Fails, not skips, if missing.
    func storeWriterPath() throws -> String {
        var candidates: [String] = []
        if let p = ProcessInfo.processInfo.environment["STORE_WRITER"] { candidates.append(p) }
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            candidates.append(URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("store-writer").path)
        }
        candidates.append(packageRoot.appendingPathComponent(".build/debug/store-writer").path)
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            XCTFail("store-writer not found (build it: swift build --product store-writer); tried \(candidates)")
            throw POSIXError(.ENOENT)
        }
        return found
    }

    /// posix_spawn of `store-writer STORE USER` with stdout on a pipe (the rest inherited).
    func spawnWriter(_ path: String, store: String) throws {
        var fds: [Int32] = [-1, -1]
        XCTAssertEqual(pipe(&fds), 0)
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)  // the dup has no FD_CLOEXEC
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(path), strdup(store), strdup(user), nil]
        let envp: [UnsafeMutablePointer<CChar>?] = ProcessInfo.processInfo.environment.map { strdup("\($0)=\($1)") } + [nil]
        defer { for a in argv + envp { free(a) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, nil, argv, envp)
        close(fds[1])
        guard rc == 0 else {
            close(fds[0])
            XCTFail("posix_spawn \(path): \(String(cString: strerror(rc)))")
            throw POSIXError(.EIO)
        }
        child = pid
        childOutput = fds[0]
    }

    /// Reads the writer's stdout until "ready"; false on EOF (the writer died) or timeout.
    func waitForReady(timeoutMilliseconds: Int32 = 10_000) -> Bool {
        var seen: [UInt8] = []
        let deadline = Date().addingTimeInterval(Double(timeoutMilliseconds) / 1000)
        while Date() < deadline {
            var p = pollfd(fd: childOutput, events: Int16(POLLIN), revents: 0)
            let r = poll(&p, 1, 100)
            if r < 0 && errno == EINTR { continue }
            if r <= 0 { continue }
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = read(childOutput, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            seen += buffer[0..<n]
            if String(decoding: seen, as: UTF8.self).contains("ready\n") { return true }
        }
        return false
    }

    /// Kills the writer with SIGKILL and reaps it; fails the test if it had exited by itself.
    func killAndReap(_ round: Int) {
        XCTAssertEqual(kill(child, SIGKILL), 0)
        var status: Int32 = 0
        var r: pid_t
        repeat { r = waitpid(child, &status, 0) } while r < 0 && errno == EINTR
        XCTAssertEqual(r, child)
        child = 0
        close(childOutput)
        childOutput = -1
        // WIFSIGNALED && WTERMSIG == SIGKILL, spelled out (the macros are not imported).
        let signalled = status & 0x7f != 0 && status & 0x7f != 0x7f
        XCTAssertTrue(signalled && status & 0x7f == SIGKILL,
                      "round \(round): store-writer was not killed by SIGKILL but ended with status \(status) (see its stderr)")
    }

    func testSIGKILLAtRandomPointsLeavesOldOrNewRecordAndAValidState() throws {
        let started = Date()
        let writer = try storeWriterPath()
        let fixture = try PAMFixture()
        self.fixture = fixture
        let storePath = fixture.store.path
        let u = Array(user.utf8)
        let store = try Store(path: Array(storePath.utf8))
        let a = try Self.recordA(), b = try Self.recordB()
        XCTAssertNotEqual(a, b)
        try store.write(user: u, record: a)

        let recordName = user, stateName = ".state." + user, lockName = ".lock." + user
        let tempName = ".tmp." + user, stateTempName = ".tmp..state." + user
        let allowed: Set<String> = [recordName, stateName, lockName, tempName, stateTempName]

        var rng = SplitMix64(seed: 0x5EED_C4A5_0001)
        let minimumKills = 200, targetKills = 500
        var readyMicroseconds: [UInt32] = []  // spawn -> "ready", measured in the waiting rounds
        let budget: TimeInterval = 40  // the loop stops at targetKills or after this long
        var kills = 0, killedBeforeReady = 0, sawA = 0, sawB = 0, staleTemp = 0, staleStateTemp = 0,
            stateMissing = 0, freshStateRounds = 0
        var lastSequence: UInt64 = 0, highestSequence: UInt64 = 0
        var stateExists = false  // until a writer first creates it; reset in fresh-state rounds

        while kills < targetKills && Date().timeIntervalSince(started) < budget {
            let round = kills
            // Every 8th round starts without a state file, so kills also land while the state
            // file is being created (temp + rename) rather than only in the in-place slot writes.
            let freshState = round % 8 == 5
            if freshState {
                freshStateRounds += 1
                _ = unlink(fixture.store.appendingPathComponent(stateName).path)
                lastSequence = 0
                stateExists = false
            }
            // Mostly: wait for "ready" (both files written once), then a random 0–30 ms. Else
            // (and in fresh-state rounds) a random delay from spawn up to a little more than the
            // writer's usual time to "ready": kills during start-up and the first writes, which
            // include the creation of the state file.
            let waitReady = !freshState && Int.random(in: 0..<4, using: &rng) != 0
            let typicalReady = readyMicroseconds.isEmpty ? 20_000 : readyMicroseconds.sorted()[readyMicroseconds.count / 2]
            let delay = waitReady ? UInt32.random(in: 0...30_000, using: &rng)
                                  : UInt32.random(in: 0...(typicalReady + typicalReady / 2), using: &rng)
            let spawned = DispatchTime.now().uptimeNanoseconds
            try spawnWriter(writer, store: storePath)
            if waitReady {
                guard waitForReady() else {
                    XCTFail("round \(round): store-writer never printed ready")
                    stopChild()
                    break
                }
                readyMicroseconds.append(UInt32(min((DispatchTime.now().uptimeNanoseconds - spawned) / 1000, 1_000_000)))
            }
            usleep(delay)
            if !waitReady {
                var p = pollfd(fd: childOutput, events: Int16(POLLIN), revents: 0)
                if poll(&p, 1, 0) == 0 { killedBeforeReady += 1 }
            }
            killAndReap(round)
            kills += 1

            // 1. The record is exactly A or exactly B.
            do {
                let record = try store.read(user: u)
                if record == a { sawA += 1 } else if record == b { sawB += 1 } else {
                    XCTFail("round \(round): record is neither version A nor B: \(String(describing: record))")
                }
            } catch {
                XCTFail("round \(round): reading the record after SIGKILL threw \(Self.text(error))")
            }
            // 2. The state parses (a valid slot survived) and its sequence never goes back.
            if FileManager.default.fileExists(atPath: fixture.store.appendingPathComponent(stateName).path) {
                stateExists = true
            } else {
                // Only possible until a writer first created it after the last reset.
                XCTAssertFalse(stateExists, "round \(round): the state file vanished")
                stateMissing += 1
            }
            do {
                let state = try store.readState(user: u)
                XCTAssertGreaterThanOrEqual(state.sequence, lastSequence, "round \(round): state sequence went backwards")
                XCTAssertEqual(state.lockedUntil, 0, "round \(round)")
                XCTAssertNil(state.lastStep(forLabel: Array("phone".utf8)), "round \(round): the writer never sets it")
                lastSequence = state.sequence
                highestSequence = max(highestSequence, state.sequence)
            } catch {
                XCTFail("round \(round): reading the state after SIGKILL threw \(Self.text(error))")
            }
            // 3. Nothing but the record, state, lock and possibly a stale temp.
            let names = Set(try FileManager.default.contentsOfDirectory(atPath: storePath))
            XCTAssertTrue(names.isSubset(of: allowed), "round \(round): unexpected files \(names.subtracting(allowed))")
            XCTAssertTrue(names.contains(recordName) && names.contains(lockName), "round \(round): \(names)")
            if names.contains(stateTempName) { staleStateTemp += 1 }
            // 4. A stale record temp does not stop the next write, which removes it. Also every
            // 10th round, to keep checking that the store stays writable after a kill.
            if names.contains(tempName) || round % 10 == 0 {
                if names.contains(tempName) { staleTemp += 1 }
                XCTAssertNoThrow(try store.write(user: u, record: a), "round \(round)")
                XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.store.appendingPathComponent(tempName).path),
                               "round \(round): the stale temp was not cleaned up")
                XCTAssertEqual(try store.read(user: u), a, "round \(round)")
            }
        }
        XCTAssertGreaterThanOrEqual(kills, minimumKills, "too few kills in the time budget")
        // The kills were not vacuous: both versions were seen, and the writer made progress.
        XCTAssertGreaterThan(sawA, 0)
        XCTAssertGreaterThan(sawB, 0)
        XCTAssertGreaterThan(highestSequence, 50, "the writer hardly wrote any state")

        // After the loop: the store still takes a record write and a state write.
        try store.write(user: u, record: a)
        XCTAssertEqual(try store.read(user: u), a)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.store.appendingPathComponent(tempName).path))
        let before = try store.readState(user: u)
        try store.withLock(user: u) { () throws(MFAError) in try store.writeStateLocked(user: u, state: before) }
        XCTAssertEqual(try store.readState(user: u).sequence, before.sequence + 1)

        // And the shipped module authenticates against what the kills left (A and B share the
        // first factor), records the step, and refuses the same code again.
        try fixture.service("totp", ["auth required MODULE STORE"])
        for version in [b, a] {
            try store.write(user: u, record: version)
            let code = try currentCode(Self.phoneSecret, offsetSteps: version == b ? -1 : 0)
            XCTAssertEqual(fixture.authenticate(service: "totp", user: user, conversation: Conversation(answer: code)),
                           PAM_SUCCESS, "record version \(version == a ? "A" : "B")")
            XCTAssertEqual(fixture.authenticate(service: "totp", user: user, conversation: Conversation(answer: code)),
                           PAM_AUTH_ERR, "replay after the kills")
        }
        let after = try store.readState(user: u)
        XCTAssertGreaterThan(after.sequence, before.sequence + 1)
        XCTAssertEqual(after.failures, 1, "the replay counted as one failure after the success")
        XCTAssertNotNil(after.lastStep(forLabel: Array("phone".utf8)))

        let typical = readyMicroseconds.isEmpty ? 0 : readyMicroseconds.sorted()[readyMicroseconds.count / 2]
        print("CrashTests: \(kills) kills (\(killedBeforeReady) before ready, \(freshStateRounds) fresh-state rounds, "
              + "median start-to-ready \(typical) µs) in "
              + String(format: "%.1f", Date().timeIntervalSince(started)) + " s; record A \(sawA)x, B \(sawB)x; "
              + "rounds with a stale .tmp \(staleTemp), with a stale state temp \(staleStateTemp), without a state \(stateMissing); "
              + "highest state sequence \(highestSequence)")
    }

    /// What a power cut during the in-place slot write could leave: the slot being written holds
    /// a prefix of the new slot over the rest of the old one. Every cut point reads as the
    /// previous state (or, once the new slot is complete, the new one), and the module still
    /// authenticates.
    func testTornStateSlotKeepsThePreviousState() throws {
        let fixture = try PAMFixture()
        self.fixture = fixture
        let u = Array(user.utf8)
        let store = try Store(path: Array(fixture.store.path.utf8))
        try store.write(user: u, record: try Self.recordA())
        let statePath = fixture.store.appendingPathComponent(".state." + user).path
        var states: [UserState] = []
        var files: [[UInt8]] = []
        for i in 1...3 {
            try store.withLock(user: u) { () throws(MFAError) in
                var s = try store.readState(user: u)
                s.failures = UInt32(i)
                s.setLastStep(UInt64(1000 * i), forLabel: Array("tablet".utf8))
                try store.writeStateLocked(user: u, state: s)
            }
            states.append(try store.readState(user: u))
            files.append(Array(try Data(contentsOf: URL(fileURLWithPath: statePath))))
        }
        XCTAssertEqual(states.map(\.sequence), [1, 2, 3])
        let slot = UserState.slotSize
        XCTAssertEqual(files[2].count, 2 * slot)
        // Sequence 3 went to slot 1, over sequence 1; slot 0 holds sequence 2 throughout.
        let newSlot = Array(files[2][slot...]), oldSlot = Array(files[1][slot...])
        XCTAssertNotEqual(newSlot, oldSlot)
        var cuts = Array(stride(from: 0, through: slot, by: 7))
        cuts += [slot - 1, slot]
        var sawPrevious = 0, sawNew = 0
        for cut in cuts {
            let torn = Array(files[2][0..<slot]) + Array(newSlot[0..<cut]) + Array(oldSlot[cut...])
            let fd = open(statePath, O_WRONLY)
            XCTAssertGreaterThanOrEqual(fd, 0)
            XCTAssertEqual(pwrite(fd, torn, torn.count, 0), torn.count)
            close(fd)
            let s = try store.readState(user: u)
            if s == states[1] { sawPrevious += 1 } else if s == states[2] { sawNew += 1 } else {
                XCTFail("cut \(cut): state \(s.sequence) is neither the previous nor the new one")
            }
        }
        XCTAssertGreaterThan(sawPrevious, 0)
        XCTAssertGreaterThan(sawNew, 0)
        // A slot zeroed entirely (a block lost) falls back too; both slots gone is an error.
        var zeroed = files[2]
        for i in slot..<(2 * slot) { zeroed[i] = 0 }
        try Data(zeroed).write(to: URL(fileURLWithPath: statePath))
        XCTAssertEqual(chmod(statePath, 0o600), 0)
        XCTAssertEqual(try store.readState(user: u), states[1])
        try fixture.service("totp", ["auth required MODULE STORE"])
        XCTAssertEqual(fixture.authenticate(service: "totp", user: user,
                                            conversation: Conversation(answer: try currentCode(Self.phoneSecret))),
                       PAM_SUCCESS, "the module accepts a code over the surviving slot")
        let both = [UInt8](repeating: 0, count: 2 * slot)
        try Data(both).write(to: URL(fileURLWithPath: statePath))
        XCTAssertThrowsError(try store.readState(user: u))
        XCTAssertEqual(fixture.authenticate(service: "totp", user: user,
                                            conversation: Conversation(answer: try currentCode(Self.phoneSecret, offsetSteps: 1))),
                       PAM_AUTHINFO_UNAVAIL, "no valid slot: denied, not treated as a fresh state")
    }
}
