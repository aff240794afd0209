// store-writer STORE_DIR USER
//
// Test-only helper for the SIGKILL crash test (Tests/PamTOTPTests/CrashTests.swift). Loops
// forever, alternately:
//   1. Store.write(user:record:) of record B, then of record A (deterministic contents, below;
//      CrashTests.swift holds the same definitions and recognises exactly these two);
//   2. a state update: withLock { readState; modify; writeStateLocked }.
// After the first full iteration (both files exist) it prints "ready" once on stdout; nothing
// else, ever, unless an operation fails: then it prints the error on stderr and exits 1, which
// the test sees as "exited" rather than "killed by SIGKILL".
//
// The state update never touches the replay guard of the factor "phone" (the one the test
// authenticates with through the module afterwards) and keeps failures small and lockedUntil
// zero, so the module can still accept a current code once the writer is gone.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem

/// Unbuffered write(2) of `text` to `fd` (no stdio: nothing is left in a buffer at SIGKILL).
func say(_ fd: Int32, _ text: String) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return }
        bytes = bytes.dropFirst(n)
    }
}

func fail(_ what: String) -> Never {
    say(2, "store-writer: \(what)\n")
    exit(1)
}

func text(_ error: MFAError) -> String {
    switch error {
    case .invalidOption(let m): return "invalid option: " + m.string
    case .invalidParameters(let m): return "invalid parameters: " + m.string
    case .insecureStore(let m): return "insecure store: " + m.string
    case .corruptRecord(let m): return "corrupt: " + m.string
    case .system(let operation, let e): return operation.string + " failed: " + e.text.string
    default: return "\(error)"
    }
}

let arguments = CommandLine.arguments
guard arguments.count == 3 else { fail("usage: store-writer STORE_DIR USER") }
let user = Array(arguments[2].utf8)

// Keep in sync with CrashTests.recordA / recordB.
let phoneSecret = Array("12345678901234567890".utf8)
let tabletSecret = [UInt8](repeating: 0x42, count: 32)

func records() throws(MFAError) -> (UserRecord, UserRecord) {
    let phone = try Factor(label: Array("phone".utf8), parameters: .default, created: 1_700_000_000, secret: phoneSecret)
    let tablet = try Factor(label: Array("tablet".utf8),
                            parameters: try OTPParameters(algorithm: .sha256, digits: 8, period: 60),
                            created: 1_700_000_001, secret: tabletSecret)
    return (UserRecord(factors: [phone]), UserRecord(factors: [phone, tablet]))
}

do throws(MFAError) {
    let (recordA, recordB) = try records()
    let store = try Store(path: Array(arguments[1].utf8))
    var iteration: UInt64 = 0
    while true {
        try store.write(user: user, record: iteration % 2 == 0 ? recordB : recordA)
        try store.withLock(user: user) { () throws(MFAError) in
            var state = try store.readState(user: user)
            state.failures = UInt32(truncatingIfNeeded: state.sequence % 7)
            state.lockedUntil = 0
            state.setLastStep(state.sequence &+ 1, forLabel: Array("tablet".utf8))
            try store.writeStateLocked(user: user, state: state)
        }
        if iteration == 0 {
            say(1, "ready\n")
        }
        iteration &+= 1
    }
} catch {
    fail(text(error))
}
