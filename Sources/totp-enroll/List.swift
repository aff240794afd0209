import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll list`: the user's factors and recovery-code count — never a secret. A phone
/// number or address is shown masked (`+1******1234`), in full only to root with
/// `--show-destinations`.
struct List: Command {
    static let name = "list"
    static let abstract = "List your factors: label, algorithm/digits/period (a token's counter, to root), created, last used (never the secret)."
    static let specs = TargetOptions.specs + [.flag("--show-destinations", "Phone numbers and email addresses in full (root only).")]

    let target: TargetOptions
    let showDestinations: Bool

    init(_ arguments: Arguments) {
        target = TargetOptions(arguments)
        showDestinations = arguments.flag("--show-destinations")
    }

    func run() throws(CommandError) {
        if showDestinations && getuid() != 0 { throw CLIError("--show-destinations is for root only") }
        let context = try target.context()
        let store = try context.openStore()
        guard let status = try storeCall({ () throws(MFAError) in try store.status(user: context.user) }),
              status.record.isEnrolled else {
            print("\(context.userName) has no factors. Run totp-enroll to add one.")
            return
        }
        let (record, state) = (status.record, status.state)
        if !record.belongs(toAccount: context.uid) {
            print("The stored record of \(context.userName) was enrolled for another account (uid \(record.uid ?? 0)); it is not used. Root: totp-enroll purge --user \(context.userName)")
        }
        // A SERIAL column (hardware tokens' serial numbers) only where a factor has one; a
        // COUNTER column only where a token's counter is shown (to root).
        let views = record.factors.map { FactorView($0, state: state, fleet: store.isFleet, root: getuid() == 0) }
        let serials = record.factors.contains { !$0.serial.isEmpty }
        let destinations = record.factors.contains { $0.destination != nil }
        let counters = views.contains { $0.counter != nil }
        var rows = [["LABEL"] + (serials ? ["SERIAL"] : []) + (destinations ? ["DESTINATION"] : [])
                    + ["ALGORITHM", "DIGITS", "PERIOD"] + (counters ? ["COUNTER"] : []) + ["CREATED", "LAST USED"]]
        for (f, v) in zip(record.factors, views) {
            let destination = f.destination.map { shown(showDestinations ? $0 : f.maskedDestination) } ?? "-"
            var row: [String] = [shown(f.label)]
            if serials { row.append(serialColumn(f.serial)) }
            if destinations { row.append(destination) }
            row += [v.algorithmColumn, v.digitsText, v.periodText]
            if counters { row.append(v.counterText) }
            row += [formatTime(f.created), v.lastUsedText]
            rows.append(row)
        }
        print(table(rows), terminator: "")
        if let r = record.recovery {
            let used = state.usedRecovery(set: r.id)
            let left = (0..<r.hashes.count).filter { $0 >= 32 || (used >> UInt32($0)) & 1 == 0 }.count
            print("Recovery codes: \(left) of \(r.hashes.count) unused.")
        } else {
            print("Recovery codes: none (totp-enroll recovery-codes makes a set).")
        }
        if state.failures > 0 {
            print("Consecutive failed attempts: \(state.failures).")
        }
    }
}

/// The SERIAL column of `list` and `status`: the serial number, escaped like a label; - for none.
func serialColumn(_ serial: [UInt8]) -> String {
    serial.isEmpty ? "-" : shown(serial)
}

/// "2026-11-21 14:03 UTC" (or another strftime format), in UTC.
func formatTime(_ t: Int64, format: String = "%Y-%m-%d %H:%M UTC") -> String {
    var time = time_t(t)
    var parts = tm()
    guard gmtime_r(&time, &parts) != nil else { return "?" }
    var buf = [CChar](repeating: 0, count: 64)
    let n = strftime(&buf, buf.count, format, &parts)
    return String(decoding: buf.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Left-aligned columns separated by two spaces.
func table(_ rows: [[String]]) -> String {
    var widths: [Int] = []
    for row in rows {
        for (i, cell) in row.enumerated() {
            if i >= widths.count { widths.append(0) }
            widths[i] = max(widths[i], cell.count)
        }
    }
    var out = ""
    for row in rows {
        var line = ""
        for (i, cell) in row.enumerated() {
            line += i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count + 2)
        }
        out += line + "\n"
    }
    return out
}
