import CLibc
import MFACrypto
import MFAPolicy
import MFASystem

// The state file: what is used, failed and locked for one user, beside the record.

extension UserState {
    // MARK: - The file: two fixed-size slots, rewritten in place

    /// The state file is `slotCount × slotSize` bytes, written once in full when created and
    /// afterwards only overwritten in place (pwrite of the older slot + fdatasync). Overwriting
    /// allocated blocks needs no free space, so logins keep working on a full disk, and a crash
    /// mid-write tears at most the slot being written: the other still holds the previous state.
    public static let slotSize = 2048
    public static let fileSize = 2 * slotSize

    /// Version 2 slot, little-endian binary (version 1 slots, text with a SHA-256 line, are
    /// still read, so an upgrade keeps every replay guard and failure count):
    /// ```
    ///  0  "PTS" 0x02          4  entry count (u16)   6  zero (u16)
    ///  8  sequence (u64)     16  record id (u64)    24  failures (u32)   28  success pid (u32)
    /// 32  locked until (i64) 40  recovery set (u64) 48  recovery used (u32) 52 zero (u32)
    /// 56  entries: key (u64), step (u64), drift (i64) — 24 bytes each
    ///     then, when the u16 at 6 is not zero, that many bytes of out-of-band data (a sent
    ///     code and the account's recent sends, `oobBytes`); then zeros
    /// slot end − 8: FNV-1a-64 of the header, entries and out-of-band data (u64)
    /// ```
    /// A state without a sent code or sends writes zero at 6 and no such bytes, exactly as
    /// before codes were sent (an older reader refuses a slot with them: only a downgrade
    /// while a user has a phone or email factor in use meets that).
    /// The checksum only detects torn and foreign slots (the file is root-only); it covers the
    /// meaningful bytes alone, so a login hashes about 100 bytes. An entry's third word was
    /// written as zero before drift was learned, so an older state reads as "no drift learned",
    /// and an older reader ignores the word. It is the slot's LAST bytes,
    /// so a write cut short (a file-size limit, a full quota) can never complete a slot: the
    /// previous state stays the valid one, and a refused attempt has changed nothing.
    static let headerSize = 56
    static let entrySize = 24

    /// One slot, `slotSize` bytes.
    func slotBytes() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Self.slotSize)
        encode(into: &out, at: 0)
        return out
    }

    /// Writes this state as a slot into `out` at `base` (the slot's bytes must be zero there).
    func encode(into out: inout [UInt8], at base: Int) {
        let count = min(lastSteps.count, Self.maxEntries)
        storeLE(&out, base, 0x0253_5450, 4)  // "PTS" 0x02
        storeLE(&out, base + 4, UInt64(count), 2)
        storeLE(&out, base + 8, sequence, 8)
        storeLE(&out, base + 16, recordID, 8)
        storeLE(&out, base + 24, UInt64(failures), 4)
        storeLE(&out, base + 28, UInt64(successProcess), 4)
        storeLE(&out, base + 32, UInt64(bitPattern: lockedUntil), 8)
        storeLE(&out, base + 40, recoverySet, 8)
        storeLE(&out, base + 48, UInt64(recoveryUsed), 4)
        var at = base + Self.headerSize
        for e in lastSteps.prefix(count) {
            storeLE(&out, at, e.key, 8)
            storeLE(&out, at + 8, e.step, 8)
            storeLE(&out, at + 16, UInt64(bitPattern: e.drift), 8)
            at += Self.entrySize
        }
        let oob = oobBytes()
        if !oob.isEmpty {
            storeLE(&out, base + 6, UInt64(oob.count), 2)
            for b in oob where at < base + Self.slotSize - 8 {
                out[at] = b
                at += 1
            }
        }
        storeLE(&out, base + Self.slotSize - 8, fnv1a64(out[base..<at]), 8)
    }

    /// Parses one slot (version 2, else version 1); nil when it is torn, zeroed, foreign or
    /// otherwise not a complete valid slot. Never traps, whatever the bytes.
    static func parse(slot: ArraySlice<UInt8>) -> UserState? {
        let s = slot.startIndex
        guard slot.count >= headerSize + 8 else { return nil }  // (a v2 slot is exactly slotSize)
        guard slot[s] == 0x50, slot[s + 1] == 0x54, slot[s + 2] == 0x53, slot[s + 3] == 0x02 else {
            return parseVersion1(slot: slot)
        }
        let count = Int(loadLE(slot, s + 4, 2))
        let oobLength = Int(loadLE(slot, s + 6, 2))
        guard count <= maxEntries, oobLength <= maxOOBBytes else { return nil }
        let end = s + headerSize + count * entrySize + oobLength
        guard slot.count == slotSize, end <= slot.endIndex - 8,
              loadLE(slot, slot.endIndex - 8, 8) == fnv1a64(slot[s..<end]) else { return nil }
        var state = UserState()
        state.sequence = loadLE(slot, s + 8, 8)
        state.recordID = loadLE(slot, s + 16, 8)
        state.failures = UInt32(truncatingIfNeeded: loadLE(slot, s + 24, 4))
        state.successProcess = UInt32(truncatingIfNeeded: loadLE(slot, s + 28, 4))
        state.lockedUntil = Int64(bitPattern: loadLE(slot, s + 32, 8))
        state.recoverySet = loadLE(slot, s + 40, 8)
        state.recoveryUsed = UInt32(truncatingIfNeeded: loadLE(slot, s + 48, 4))
        var at = s + headerSize
        for _ in 0..<count {
            // A drift beyond any window (a foreign or hand-made slot) reads as none.
            var drift = Int64(bitPattern: loadLE(slot, at + 16, 8))
            if drift > Int64(TOTPVerifier.maxAdjacentIntervals) || drift < -Int64(TOTPVerifier.maxAdjacentIntervals) { drift = 0 }
            state.lastSteps.append((loadLE(slot, at, 8), loadLE(slot, at + 8, 8), drift))
            at += entrySize
        }
        if oobLength > 0 {
            guard state.parseOOB(slot[at..<(at + oobLength)]) else { return nil }
        }
        return state
    }

    /// The out-of-band data of a slot (`oobBytes`):
    /// ```
    ///  0  flags (u8)  1  digits (u8)  2  attempts left (u8)  3  send count (u8)  4 zero (u32)
    ///  8  zero (u64)  16  sent at (i64)  24  expires at (i64)  32  salt (16 bytes)  48  SHA-256 (32 bytes)
    /// 80  flags 2: the code's binding (`PendingCode.binding`, 32 bytes)
    ///     then the send times (i64 each, oldest first)
    /// ```
    /// Flags: 0 no code pending; 2 a code is pending, bound to its factor by the 32 bytes at
    /// 80. 1 is the layout before issue 36: a pending code bound by a 64-bit FNV-1a key at 8,
    /// which could collide; such a slot is still read (its sends count), but its code is not
    /// honoured (it lived `oob_lifetime` at most: the user asks for another).
    /// Empty when there is neither a pending code nor a recent send.
    static let oobHeaderSize = 80
    static let maxOOBBytes = oobHeaderSize + PendingCode.bindingSize + 8 * maxSends

    @_optimize(size)  // cold: a login with a phone or address only
    func oobBytes() -> [UInt8] {
        guard pending != nil || !sends.isEmpty else { return [] }
        let times = sends.suffix(Self.maxSends)
        let written = pending.flatMap { p in
            p.salt.count == PendingCode.saltSize && p.hash.count == 32 && p.binding.count == PendingCode.bindingSize ? p : nil
        }
        let bound = written == nil ? 0 : PendingCode.bindingSize
        var out = [UInt8](repeating: 0, count: Self.oobHeaderSize + bound + 8 * times.count)
        storeLE(&out, 3, UInt64(times.count), 1)
        if let p = written {
            storeLE(&out, 0, 2, 1)
            storeLE(&out, 1, UInt64(p.digits), 1)
            storeLE(&out, 2, UInt64(p.attemptsLeft), 1)
            storeLE(&out, 16, UInt64(bitPattern: p.sentAt), 8)
            storeLE(&out, 24, UInt64(bitPattern: p.expiresAt), 8)
            for i in 0..<PendingCode.saltSize { out[32 + i] = p.salt[i] }
            for i in 0..<32 { out[48 + i] = p.hash[i] }
            for i in 0..<PendingCode.bindingSize { out[Self.oobHeaderSize + i] = p.binding[i] }
        }
        var at = Self.oobHeaderSize + bound
        for t in times {
            storeLE(&out, at, UInt64(bitPattern: t), 8)
            at += 8
        }
        return out
    }

    /// Reads `oobBytes`' layout; false if it is not exactly that.
    @_optimize(size)  // cold: a login with a phone or address only
    mutating func parseOOB(_ b: ArraySlice<UInt8>) -> Bool {
        let s = b.startIndex
        guard b.count >= Self.oobHeaderSize else { return false }
        let flags = loadLE(b, s, 1), n = Int(loadLE(b, s + 3, 1))
        let bound = flags == 2 ? PendingCode.bindingSize : 0
        guard flags <= 2, loadLE(b, s + 4, 4) == 0, n <= Self.maxSends, b.count == Self.oobHeaderSize + bound + 8 * n else { return false }
        if flags != 0 {
            let digits = UInt8(truncatingIfNeeded: loadLE(b, s + 1, 1))
            guard digits >= 6 && digits <= 8 else { return false }
            // flags 1 (before issue 36): a 64-bit key that could collide binds it: not honoured.
            if flags == 2 {
                guard loadLE(b, s + 8, 8) == 0 else { return false }
                pending = PendingCode(binding: Array(b[(s + Self.oobHeaderSize)..<(s + Self.oobHeaderSize + bound)]),
                                      sentAt: Int64(bitPattern: loadLE(b, s + 16, 8)),
                                      expiresAt: Int64(bitPattern: loadLE(b, s + 24, 8)), digits: digits,
                                      attemptsLeft: UInt8(truncatingIfNeeded: loadLE(b, s + 2, 1)),
                                      salt: Array(b[(s + 32)..<(s + 48)]), hash: Array(b[(s + 48)..<(s + 80)]))
            }
        }
        var times: [Int64] = []
        var at = s + Self.oobHeaderSize + bound
        for _ in 0..<n {
            times.append(Int64(bitPattern: loadLE(b, at, 8)))
            at += 8
        }
        sends = times
        return true
    }

    /// A version-1 slot: text lines, then `end <SHA-256 of everything before this line>\n`,
    /// then zeros.
    @_optimize(size)  // cold: not on a login's path
    static func parseVersion1(slot: ArraySlice<UInt8>) -> UserState? {
        let magicLength = 16  // "pam_totp-state 1"
        guard slot.count > magicLength + 70, equals(slot.prefix(magicLength), "pam_totp-state 1") else { return nil }
        // "\nend " + 64 hex + "\n" is 70 bytes from the newline: all of them must be in the slot.
        var endAt: Int? = nil
        var i = slot.startIndex
        while i + 70 <= slot.endIndex {
            if slot[i] == ASCII.newline && equals(slot[(i + 1)..<(i + 5)], "end ") {
                endAt = i + 1
                break
            }
            i += 1
        }
        guard let end = endAt else { return nil }
        let body = Array(slot[slot.startIndex..<end])
        let checksumStart = end + 4
        guard let stored = Hex.decode(slot[checksumStart..<(checksumStart + 64)]),
              constantTimeEqual(stored, SHA256.hash(body)),
              slot[checksumStart + 64] == ASCII.newline else { return nil }
        var state = UserState()
        let lines = body.split(separator: ASCII.newline)
        guard let first = lines.first, equals(first, "pam_totp-state 1") else { return nil }
        for line in lines.dropFirst() {
            let f = splitFields(line)
            guard f.count >= 2 else { return nil }
            if equals(f[0], "seq") {
                guard f.count == 2, let v = parseDecimal(f[1], limit: UInt64.max) else { return nil }
                state.sequence = v
            } else if equals(f[0], "failures") {
                guard f.count == 2, let v = parseDecimal(f[1], limit: UInt64(UInt32.max)) else { return nil }
                state.failures = UInt32(v)
            } else if equals(f[0], "locked_until") {
                guard f.count == 2, let v = parseDecimal(f[1], limit: UInt64(Int64.max)) else { return nil }
                state.lockedUntil = Int64(v)
            } else if equals(f[0], "recovery") {
                guard f.count == 3, f[1].count == 16, let id = Hex.decode(f[1]),
                      let used = parseDecimal(f[2], limit: UInt64(UInt32.max)) else { return nil }
                state.recoverySet = uint64(id)
                state.recoveryUsed = UInt32(used)
            } else if equals(f[0], "step") {
                guard f.count == 3, f[1].count == 16, let k = Hex.decode(f[1]),
                      let step = parseDecimal(f[2], limit: UInt64.max),
                      state.lastSteps.count < maxEntries else { return nil }
                state.lastSteps.append((uint64(k), step, 0))
            } else {
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

/// Stores the low `width` bytes of `value` little-endian at `offset` (in range by construction:
/// callers write fixed offsets inside a slot-sized buffer).
func storeLE(_ out: inout [UInt8], _ offset: Int, _ value: UInt64, _ width: Int) {
    var v = value
    var i = offset
    let end = min(offset + width, out.count)
    while i < end {
        out[i] = UInt8(truncatingIfNeeded: v)
        v >>= 8
        i += 1
    }
}

/// The little-endian value of `width` bytes at `offset`; bytes past the end read as 0.
func loadLE(_ bytes: ArraySlice<UInt8>, _ offset: Int, _ width: Int) -> UInt64 {
    var v: UInt64 = 0
    var i = offset + width - 1
    while i >= offset {
        v = v << 8 | (i < bytes.endIndex && i >= bytes.startIndex ? UInt64(bytes[i]) : 0)
        i -= 1
    }
    return v
}

extension FileStore {
    static func stateName(_ user: [UInt8]) -> [UInt8] {
        var name: [UInt8] = []
        name.append(literal: ".state.")
        return name + user
    }

    /// The user's state; a missing state file is the initial state (never used, no failures).
    public func readState(user: [UInt8]) throws(MFAError) -> UserState {
        try readStateForUpdate(user: user, flags: O_RDONLY).state
    }

    /// The state and the open state file (nil if there is none yet), so that the write after
    /// a login needs no second open. The state holds no secret: it is not wiped.
    func readStateForUpdate(user: [UInt8], flags: Int32 = O_RDWR) throws(MFAError) -> (state: UserState, file: OwnedFD<Sys>?) {
        try Self.validate(user: user)
        guard let (file, _) = try openChecked(Self.stateName(user), flags: flags, what: "state file") else {
            return (UserState(), nil)
        }
        let bytes = try readBounded(Sys.self, file.raw, limit: UserState.fileSize, expected: UserState.fileSize)
        guard let state = UserState.parse(file: bytes) else { throw .corruptRecord("state file has no valid slot") }
        return (state, file)
    }

    /// Writes `state` (whose `sequence` is the one read) as the next sequence into the older
    /// slot. The caller must hold the user's lock. Creates the file, fully allocated, if needed.
    /// Every write is the same size at the same offset for a given sequence, whatever the
    /// state says: whether it can be written does not depend on what was decided. `file` is
    /// the state file opened read-write by `readStateForUpdate`, if the caller has it.
    public func writeStateLocked(user: [UInt8], state: UserState) throws(MFAError) {
        try writeStateLocked(user: user, state: state, file: nil)
    }

    func writeStateLocked(user: [UInt8], state: UserState, file known: OwnedFD<Sys>?) throws(MFAError) {
        try Self.validate(user: user)
        var next = state
        next.sequence = state.sequence &+ 1
        let offset = Int(next.sequence % 2) * UserState.slotSize
        let name = Self.stateName(user)
        var file = known
        if file == nil { file = try openChecked(name, flags: O_RDWR, what: "state file")?.file }
        if let file {
            try writeAll(Sys.self, file.raw, next.slotBytes(), at: offset)
            _ = try retryingOnEINTR("fdatasync state") { Sys.fdatasync(file.raw) }
            return
        }
        // First write: create the whole file through a temp name and rename it into place, so
        // the state file exists either complete or not at all.
        var whole = [UInt8](repeating: 0, count: UserState.fileSize)
        next.encode(into: &whole, at: offset)
        try replaceFile(name, contents: whole)
    }
}
