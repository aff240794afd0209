import CLibc
import MFACrypto
import MFAPolicy
import MFASystem

// Sends counted per destination, whatever the account (docs/ARCHITECTURE.md, section 4, rule
// 19): the per-account limits live in each user's state, but many accounts (or a user's own,
// re-enrolling) could then each text one number their own allowance. The store keeps one more
// file, `.sends`: every send of the last day as its destination's key (OutOfBand.destinationKey,
// a SHA-256: no number or address is written) and its time, locked by `.lock..sends` and
// replaced whole like a record. Its name starts with '.', which no user name may.

/// The sends of the last day, per destination key. One line per send: 64 hex digits, a space,
/// the Unix time in decimal, a newline. At most `maxEntries` (the oldest are dropped first).
struct DestinationLedger: Equatable {
    static let maxEntries = 4096
    /// 64 + 1 + 20 + 1 bytes a line at most.
    static let maxSize = maxEntries * 86
    static var fileName: [UInt8] { literal(".sends") }
    static var lockName: [UInt8] { literal(".lock..sends") }

    var entries: [(key: [UInt8], at: Int64)] = []

    static func == (a: DestinationLedger, b: DestinationLedger) -> Bool {
        a.entries.count == b.entries.count && zip(a.entries, b.entries).allSatisfy { $0.key == $1.key && $0.at == $1.at }
    }

    /// The ledger in `bytes`; nil when any line is not a key and a time (the file is root's:
    /// a damaged one denies sends until it is removed, never counts nothing).
    static func parse(_ bytes: [UInt8]) -> DestinationLedger? {
        guard bytes.count <= maxSize else { return nil }
        var ledger = DestinationLedger()
        for line in bytes.split(separator: ASCII.newline) {
            guard ledger.entries.count < maxEntries, line.count >= 66, line.count <= 85 else { return nil }
            let start = line.startIndex
            guard line[start + 64] == ASCII.space, let key = Hex.decode(line[start..<(start + 64)]),
                  let at = parseDecimal(line[(start + 65)...], limit: UInt64(Int64.max)) else { return nil }
            ledger.entries.append((key, Int64(at)))
        }
        guard bytes.isEmpty || bytes.last == ASCII.newline else { return nil }
        return ledger
    }

    func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(entries.count * 86)
        for e in entries {
            out += Hex.encode(e.key)
            out.append(ASCII.space)
            out += decimalBytes(UInt64(max(e.at, 0)))
            out.append(ASCII.newline)
        }
        return out
    }

    /// Sends to `key` within the last hour and the last day before `now`.
    func counts(_ key: [UInt8], at now: Int64) -> (hour: Int, day: Int) {
        var hour = 0, day = 0
        for e in entries where e.key == key {
            let age = secondsSince(e.at, at: now)
            if age < 86_400 { day += 1 }
            if age < 3_600 { hour += 1 }
        }
        return (hour, day)
    }

    /// Adds a send at `now` and drops what is a day old (or, past `maxEntries`, the oldest).
    mutating func add(_ key: [UInt8], at now: Int64) {
        entries.removeAll { secondsSince($0.at, at: now) >= 86_400 }
        if entries.count >= Self.maxEntries { entries.removeFirst(entries.count - Self.maxEntries + 1) }
        entries.append((key, now))
    }
}

extension FileStore {
    /// Counts a send to `factor`'s destination at `now`, or says why none may go there now
    /// (`OutOfBand.destinationRefusal`; then nothing is written). Under the ledger's lock, which
    /// is always taken after a user's lock, never before.
    func recordDestinationSend(_ factor: Factor, at now: Int64, options: ModuleOptions) throws(MFAError) -> Message? {
        try withLockFile(DestinationLedger.lockName) { () throws(MFAError) -> Message? in
            var ledger = DestinationLedger()
            if let (file, st) = try openChecked(DestinationLedger.fileName, flags: O_RDONLY, what: "sends file") {
                let bytes = try readBounded(Sys.self, file.raw, limit: DestinationLedger.maxSize,
                                            expected: min(Int(clamping: st.size), DestinationLedger.maxSize + 1))
                guard let parsed = DestinationLedger.parse(bytes) else {
                    throw .corruptRecord("the sends file .sends is damaged (remove it to start counting again)")
                }
                ledger = parsed
            }
            let key = OutOfBand.destinationKey(factor)
            let (hour, day) = ledger.counts(key, at: now)
            if let why = OutOfBand.destinationRefusal(factor, hour: hour, day: day, options: options) { return why }
            ledger.add(key, at: now)
            try replaceFile(DestinationLedger.fileName, contents: ledger.serialized())
            return nil
        }
    }
}
