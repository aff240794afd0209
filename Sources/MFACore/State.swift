import CLibc

/// A user's mutable state, kept apart from the enrolment record in `.state.USER`:
/// the last accepted time step per factor (replay guard), consecutive failures, the lockout
/// deadline, and which recovery codes of the current set were used.
public struct UserState: Equatable, Sendable {
    public static let hardFailureCap: UInt32 = 100  // NIST SP 800-63B §5.2.2

    /// Bumped on every write; the reader takes the valid slot with the highest sequence.
    public var sequence: UInt64 = 0
    public var failures: UInt32 = 0
    public var lockedUntil: Int64 = 0
    public var recoverySet: UInt64 = 0
    public var recoveryUsed: UInt32 = 0
    /// (factor key, last accepted step), one entry per factor that was ever used.
    public var lastSteps: [(key: UInt64, step: UInt64)] = []

    public init() {}

    public static func == (a: UserState, b: UserState) -> Bool {
        a.sequence == b.sequence && a.failures == b.failures && a.lockedUntil == b.lockedUntil
            && a.recoverySet == b.recoverySet && a.recoveryUsed == b.recoveryUsed
            && a.lastSteps.count == b.lastSteps.count
            && !zip(a.lastSteps, b.lastSteps).contains { $0.key != $1.key || $0.step != $1.step }
    }

    /// The factor's key in the state: FNV-1a of its label (labels are unique within a record,
    /// and the state stays small whatever the labels are). Two labels that collided would share
    /// one replay step, which only ever refuses more codes, never fewer.
    public static func key(forLabel label: [UInt8]) -> UInt64 {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for b in label { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01B3 }
        return h
    }

    public func lastStep(forLabel label: [UInt8]) -> UInt64? {
        let k = Self.key(forLabel: label)
        return lastSteps.first { $0.key == k }?.step
    }

    public mutating func setLastStep(_ step: UInt64, forLabel label: [UInt8]) {
        let k = Self.key(forLabel: label)
        if let i = lastSteps.firstIndex(where: { $0.key == k }) {
            lastSteps[i].step = step
        } else {
            lastSteps.append((k, step))
        }
    }

    /// Used bits of the recovery set `id` (a different set's bits do not carry over).
    public func usedRecovery(set id: UInt64) -> UInt32 { recoverySet == id ? recoveryUsed : 0 }

    public mutating func markRecoveryUsed(set id: UInt64, index: Int) {
        if recoverySet != id { recoverySet = id; recoveryUsed = 0 }
        if index >= 0 && index < 32 { recoveryUsed |= UInt32(1) << UInt32(index) }
    }

    // MARK: - The file: two fixed-size slots, rewritten in place

    /// The state file is `slotCount × slotSize` bytes, written once in full when created and
    /// afterwards only overwritten in place (pwrite of the older slot + fdatasync). Overwriting
    /// allocated blocks needs no free space, so logins keep working on a full disk, and a crash
    /// mid-write tears at most the slot being written: the other still holds the previous state.
    public static let slotSize = 2048
    public static let fileSize = 2 * slotSize
    public static let maxEntries = UserRecord.maxFactors
    static let magic = Array("pam_totp-state 1".utf8)

    /// One slot: text lines, then `end <SHA-256 of everything before this line>`, then zeros.
    func slotBytes() -> [UInt8] {
        var out = Self.magic + [ASCII.newline]
        out += Array("seq ".utf8) + decimalBytes(sequence) + [ASCII.newline]
        out += Array("failures ".utf8) + decimalBytes(UInt64(failures)) + [ASCII.newline]
        out += Array("locked_until ".utf8) + decimalBytes(lockedUntil) + [ASCII.newline]
        out += Array("recovery ".utf8) + hex64(recoverySet) + [ASCII.space] + decimalBytes(UInt64(recoveryUsed)) + [ASCII.newline]
        for e in lastSteps.prefix(Self.maxEntries) {
            out += Array("step ".utf8) + hex64(e.key) + [ASCII.space] + decimalBytes(e.step) + [ASCII.newline]
        }
        out += Array("end ".utf8) + Hex.encode(SHA256.hash(out)) + [ASCII.newline]
        if out.count < Self.slotSize { out += [UInt8](repeating: 0, count: Self.slotSize - out.count) }
        return out
    }

    /// Parses one slot; nil when it is torn, zeroed or otherwise not a complete valid slot.
    static func parse(slot: ArraySlice<UInt8>) -> UserState? {
        // A slot starts with the magic line (a zeroed or foreign slot stops here), and its
        // checksum line "end <64 hex>\n" covers every byte before it.
        guard slot.count > magic.count + 70, slot.prefix(magic.count).elementsEqual(magic) else { return nil }
        let e: UInt8 = 0x65, n: UInt8 = 0x6E, d: UInt8 = 0x64
        var endAt: Int? = nil
        var i = slot.startIndex
        while i + 69 <= slot.endIndex {
            if slot[i] == ASCII.newline && slot[i + 1] == e && slot[i + 2] == n && slot[i + 3] == d && slot[i + 4] == ASCII.space {
                endAt = i + 1
                break
            }
            i += 1
        }
        guard let end = endAt else { return nil }
        let body = Array(slot[slot.startIndex..<end])
        let checksumStart = end + 4  // end + 4 + 64 < endIndex: the loop left room for it
        guard let stored = Hex.decode(slot[checksumStart..<(checksumStart + 64)]),
              constantTimeEqual(stored, SHA256.hash(body)),
              slot[checksumStart + 64] == ASCII.newline else { return nil }
        var state = UserState()
        let lines = body.split(separator: ASCII.newline)
        guard let first = lines.first, Array(first) == magic else { return nil }
        for line in lines.dropFirst() {
            let f = splitFields(line)
            guard f.count >= 2 else { return nil }
            switch Array(f[0]) {
            case Array("seq".utf8):
                guard f.count == 2, let v = parseDecimal(f[1], limit: UInt64.max) else { return nil }
                state.sequence = v
            case Array("failures".utf8):
                guard f.count == 2, let v = parseDecimal(f[1], limit: UInt64(UInt32.max)) else { return nil }
                state.failures = UInt32(v)
            case Array("locked_until".utf8):
                guard f.count == 2, let v = parseDecimal(f[1], limit: UInt64(Int64.max)) else { return nil }
                state.lockedUntil = Int64(v)
            case Array("recovery".utf8):
                guard f.count == 3, f[1].count == 16, let id = Hex.decode(f[1]),
                      let used = parseDecimal(f[2], limit: UInt64(UInt32.max)) else { return nil }
                state.recoverySet = uint64(id)
                state.recoveryUsed = UInt32(used)
            case Array("step".utf8):
                guard f.count == 3, f[1].count == 16, let k = Hex.decode(f[1]),
                      let step = parseDecimal(f[2], limit: UInt64.max),
                      state.lastSteps.count < maxEntries else { return nil }
                state.lastSteps.append((uint64(k), step))
            default:
                return nil
            }
        }
        return state
    }

    /// The newest valid slot of a whole state file; nil if neither slot is valid.
    static func parse(file: [UInt8]) -> UserState? {
        guard file.count == fileSize else { return nil }
        let a = parse(slot: file[0..<slotSize])
        let b = parse(slot: file[slotSize..<fileSize])
        switch (a, b) {
        case (let x?, let y?): return x.sequence >= y.sequence ? x : y
        case (let x?, nil): return x
        case (nil, let y?): return y
        case (nil, nil): return nil
        }
    }
}

extension Store {
    static func stateName(_ user: [UInt8]) -> [UInt8] { Array(".state.".utf8) + user }

    /// The user's state; a missing state file is the initial state (never used, no failures).
    public func readState(user: [UInt8]) throws(MFAError) -> UserState {
        try Store.validate(user: user)
        guard let file = try openChecked(Store.stateName(user), flags: O_RDONLY, what: "state file") else {
            return UserState()
        }
        var bytes = try readBounded(file.raw, limit: UserState.fileSize, expected: UserState.fileSize)
        defer { wipe(&bytes) }
        guard let state = UserState.parse(file: bytes) else { throw .corruptRecord("state file has no valid slot") }
        return state
    }

    /// Writes `state` (whose `sequence` is the one read) as the next sequence into the older
    /// slot. The caller must hold the user's lock. Creates the file, fully allocated, if needed.
    public func writeStateLocked(user: [UInt8], state: UserState) throws(MFAError) {
        try Store.validate(user: user)
        var next = state
        next.sequence = state.sequence &+ 1
        let slot = next.slotBytes()
        guard slot.count == UserState.slotSize else { throw .invalidParameters("state too large") }
        let offset = Int(next.sequence % 2) * UserState.slotSize
        let name = Store.stateName(user)
        if let file = try openChecked(name, flags: O_RDWR, what: "state file") {
            try writeAll(file.raw, slot, at: offset)
            _ = try retryingOnEINTR("fdatasync state") { fdatasync(file.raw) }
            return
        }
        // First write: create the whole file through a temp name and rename it into place, so
        // the state file exists either complete or not at all.
        let empty = [UInt8](repeating: 0, count: UserState.slotSize)
        let whole = offset == 0 ? slot + empty : empty + slot
        try replaceFile(name, contents: whole)
    }

    /// Opens `name` in the store with O_NOFOLLOW and checks it; nil if it does not exist.
    func openChecked(_ name: [UInt8], flags: Int32, what: Message) throws(MFAError) -> OwnedFD? {
        let fd: Int32
        do throws(MFAError) {
            fd = try withCPath(name) { (p) throws(MFAError) -> Int32 in
                try retryingOnEINTR("open " + what) {
                    clibc_openat(directory.raw, p, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0)
                }
            }
        } catch {
            if case .system(_, let e) = error {
                if e == ENOENT { return nil }
                if e == ELOOP { throw .insecureStore(what + " is a symlink") }
            }
            throw error
        }
        let file = OwnedFD(fd)
        try checkFile(file.raw, what: what)
        return file
    }
}
