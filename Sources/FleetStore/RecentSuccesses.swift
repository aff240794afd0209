import CLibc
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// Fleet mode: which process last had a code accepted for a user through this daemon, and a
/// counter of verdicts. The file store keeps both in the user's state (successProcess,
/// sequence), and totp-enroll reads them to see that its own PAM stack accepted a code while it
/// ran, so it does not ask for a second one (which, in the same 30-s step, would be a replay).
/// The database keeps neither (a process id means nothing on another host): PostgresStore
/// remembers them in memory for the statuses it returns. Lost on restart, which only means one
/// more code.
final class RecentSuccesses: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var entries: [[UInt8]: (sequence: UInt64, process: UInt32)] = [:]
    private var counter: UInt64 = 0
    /// Bounds the memory: beyond it the oldest half is forgotten.
    let maxEntries = 4096

    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }

    private func locked<R>(_ body: () -> R) -> R {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return body()
    }

    /// A verdict that was recorded: a success names its process, anything else clears it.
    func record(_ outcome: AuthOutcome, user: [UInt8], process: UInt32) {
        let pid: UInt32
        switch outcome {
        case .success, .recoveryCode: pid = process
        case .wrongCode, .resyncNeeded: pid = 0
        case .notRecorded, .lockedOut, .unenrolled, .failed: return
        }
        locked {
            counter &+= 1
            if entries[user] == nil && entries.count >= maxEntries {
                let cut = counter &- UInt64(maxEntries / 2)
                entries = entries.filter { $0.value.sequence > cut }
            }
            entries[user] = (counter, pid)
        }
    }

    func apply(to status: inout UserStatus, user: [UInt8]) {
        guard let e = locked({ entries[user] }) else { return }
        status.state.sequence = e.sequence
        status.state.successProcess = e.process
    }
}
