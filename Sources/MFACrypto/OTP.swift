import MFASystem

/// The parameters of one TOTP factor. Defaults are the ones every authenticator app supports.
public struct OTPParameters: Equatable, Sendable {
    public static let digitsRange: ClosedRange<Int> = 6...8
    public static let periodRange: ClosedRange<UInt64> = 1...3600
    public static let `default` = OTPParameters(uncheckedAlgorithm: .sha1, digits: 6, period: 30)

    public let algorithm: HashAlgorithm
    public let digits: Int
    public let period: UInt64

    public init(algorithm: HashAlgorithm, digits: Int, period: UInt64) throws(MFAError) {
        guard Self.digitsRange.contains(digits) else { throw .invalidParameters("digits must be 6, 7 or 8") }
        guard Self.periodRange.contains(period) else { throw .invalidParameters("period must be 1 to 3600 seconds") }
        self.algorithm = algorithm
        self.digits = digits
        self.period = period
    }

    init(uncheckedAlgorithm: HashAlgorithm, digits: Int, period: UInt64) {
        self.algorithm = uncheckedAlgorithm
        self.digits = digits
        self.period = period
    }

    /// 10^digits for the supported digit counts.
    var modulus: UInt32 {
        switch digits {
        case 6: return 1_000_000
        case 7: return 10_000_000
        default: return 100_000_000
        }
    }
}

extension HashAlgorithm {
    /// The name used in otpauth URIs and the store ("SHA1" in URIs, lower case in the store).
    public var name: String {
        switch self {
        case .sha1: return "sha1"
        case .sha256: return "sha256"
        case .sha512: return "sha512"
        }
    }

    /// `name` as bytes, for the store.
    package var nameBytes: [UInt8] {
        switch self {
        case .sha1: return Array(bytes("sha1"))
        case .sha256: return Array(bytes("sha256"))
        case .sha512: return Array(bytes("sha512"))
        }
    }

    public init?(name: some Collection<UInt8>) {
        // Case-insensitive, without building a lowered copy.
        func named(_ literal: StaticString) -> Bool {
            let want = bytes(literal)
            guard name.count == want.count else { return false }
            var i = 0
            for c in name {
                let lower = c >= 0x41 && c <= 0x5A ? c | 0x20 : c
                if lower != want[i] { return false }
                i += 1
            }
            return true
        }
        if named("sha1") { self = .sha1 } else if named("sha256") { self = .sha256 } else if named("sha512") { self = .sha512 } else { return nil }
    }

    /// RFC 6238 recommends a key as long as the digest.
    public var recommendedSecretLength: Int { digestLength }
}

/// RFC 4226 HOTP.
public enum HOTP {
    /// The dynamic-truncation value modulo 10^digits.
    public static func value(key: HMACKey, counter: UInt64, digits: Int) -> UInt32 {
        let binary = key.truncatedHOTP(counter: counter)
        let modulus: UInt32
        switch digits {
        case ...6: modulus = 1_000_000
        case 7: modulus = 10_000_000
        default: modulus = 100_000_000
        }
        return binary % modulus
    }

    /// The code as zero-padded ASCII digits.
    public static func code(key: HMACKey, counter: UInt64, digits: Int) -> [UInt8] {
        format(value(key: key, counter: counter, digits: digits), digits: digits)
    }

    static func format(_ value: UInt32, digits: Int) -> [UInt8] {
        var out = [UInt8](repeating: ASCII.zero, count: max(digits, 1))
        var v = value
        var i = out.count - 1
        while i >= 0 {
            out[i] = ASCII.zero &+ UInt8(truncatingIfNeeded: v % 10)
            v /= 10
            i -= 1
        }
        return out
    }
}

/// RFC 6238 TOTP with T0 = 0.
public enum TOTP {
    /// The time step containing `unixTime`; throws for times before the epoch.
    public static func step(at unixTime: Int64, period: UInt64) throws(MFAError) -> UInt64 {
        guard unixTime >= 0, period > 0 else { throw .clockOutOfRange }
        return UInt64(unixTime) / period
    }

    public static func code(secret: [UInt8], parameters: OTPParameters, at unixTime: Int64) throws(MFAError) -> [UInt8] {
        let key = HMACKey(algorithm: parameters.algorithm, key: secret)
        return HOTP.code(key: key, counter: try step(at: unixTime, period: parameters.period),
                         digits: parameters.digits)
    }
}

/// The verifier: accepts a code that matches any time step in [T−N, T+N].
public struct TOTPVerifier: Sendable {
    public static let maxAdjacentIntervals = 10
    public static let defaultAdjacentIntervals = 5

    public let adjacentIntervals: Int

    public init(adjacentIntervals: Int = TOTPVerifier.defaultAdjacentIntervals) throws(MFAError) {
        guard adjacentIntervals >= 0 && adjacentIntervals <= Self.maxAdjacentIntervals else {
            throw .invalidOption("adjacent_intervals must be 0 to 10")
        }
        self.adjacentIntervals = adjacentIntervals
    }

    /// Parses a submitted answer: exactly `digits` ASCII digits, nothing else. Anything else
    /// (empty, too long, spaces, NUL, letters) is nil and can never match.
    public static func parseCode(_ answer: [UInt8], digits: Int) -> UInt32? {
        guard answer.count == digits, let v = parseDecimal(answer, limit: UInt64(UInt32.max)) else { return nil }
        return UInt32(truncatingIfNeeded: v)
    }

    /// Checks `answer` against every step of the window around `unixTime`, computing and
    /// comparing all of them without an early exit. Steps at or below `notAfter` (the last step
    /// already used, for the replay guard) are computed but can never match. Returns the lowest
    /// matching step, or nil.
    public func verify(answer: [UInt8], key: HMACKey, parameters: OTPParameters,
                       at unixTime: Int64, usedUpTo notAfter: UInt64? = nil) throws(MFAError) -> UInt64? {
        try match(answer: answer, key: key, parameters: parameters, at: unixTime, usedUpTo: notAfter).step
    }

    /// The result of checking one factor: the lowest unused matching step, and whether the
    /// answer matched a step that was already used (a replay).
    public struct Match: Equatable, Sendable {
        public var step: UInt64?
        public var replayed: Bool
    }

    /// `drift` is the factor's learned clock drift in steps (see "Clock drift" below): the
    /// window is centred on `now + drift`, with `drift` first bounded to ±`adjacentIntervals`.
    /// The window keeps its 2N+1 steps whatever the drift.
    @_optimize(speed)
    public func match(answer: [UInt8], key: HMACKey, parameters: OTPParameters,
                      at unixTime: Int64, usedUpTo notAfter: UInt64?, drift: Int64 = 0) throws(MFAError) -> Match {
        let now = try TOTP.step(at: unixTime, period: parameters.period)
        let n = UInt64(adjacentIntervals)
        let centre = Self.centre(now: now, drift: bounded(drift))
        let (last, overflow) = centre.addingReportingOverflow(n)
        guard !overflow else { throw .clockOutOfRange }
        return Self.scan(answer: answer, key: key, digits: parameters.digits, from: centre >= n ? centre - n : 0, to: last,
                         usedUpTo: notAfter)
    }

    /// Every counter of `first...last` computed and compared with `answer`, without an early
    /// exit or a branch on a code's value (TOTP's steps, HOTP's look-ahead): the lowest
    /// matching counter above `notAfter`, and whether one at or below it matched (a replay).
    @_optimize(speed)
    static func scan(answer: [UInt8], key: HMACKey, digits: Int, from first: UInt64, to last: UInt64,
                     usedUpTo notAfter: UInt64?) -> Match {
        // A malformed answer still costs the same HMACs, so its timing says nothing.
        let wanted = parseCode(answer, digits: digits) ?? UInt32.max  // never a valid code value (codes are < 10^8)
        var found: UInt64 = 0
        var foundMask: UInt64 = 0  // all ones once an eligible step matched
        var usedMatch: UInt64 = 0  // all ones once a used step matched
        var step = first
        while step <= last {
            let value = HOTP.value(key: key, counter: step, digits: digits)
            let eligible: UInt64 = (notAfter.map { step > $0 } ?? true) ? ~0 : 0
            // equal == all ones iff value == wanted, computed without a branch on the value.
            let x = UInt64(value ^ wanted)
            let equal: UInt64 = ((x | (0 &- x)) >> 63) &- 1
            let take = equal & eligible & ~foundMask
            found = (found & ~take) | (step & take)
            foundMask |= take
            usedMatch |= equal & ~eligible
            if step == UInt64.max { break }
            step += 1
        }
        return Match(step: foundMask != 0 ? found : nil, replayed: usedMatch != 0)
    }

    // MARK: - Clock drift
    //
    // A factor learns where its device's clock is: at every accepted code, the offset of the
    // matched step from this host's step (bounded to ±adjacent_intervals) is stored with the
    // used step, and the next check is centred on it. The window never grows: it is always the
    // 2N+1 steps of adjacent_intervals=N, centred on the learned offset, so a device whose
    // clock wanders slowly keeps working, and no code is ever accepted more than 2N steps from
    // this host's clock (N from where the device last was). With adjacent_intervals=0 nothing
    // is learned. Every step of the window is still computed and compared (constant time).

    /// `drift` bounded to ±`adjacentIntervals`.
    public func bounded(_ drift: Int64) -> Int64 {
        let n = Int64(adjacentIntervals)
        return drift > n ? n : (drift < -n ? -n : drift)
    }

    /// The drift a match at `step` teaches, at `unixTime`: its offset from this host's step,
    /// bounded to ±`adjacentIntervals`.
    public func drift(ofStep step: UInt64, at unixTime: Int64, period: UInt64) -> Int64 {
        guard let now = try? TOTP.step(at: unixTime, period: period) else { return 0 }
        let limit = UInt64(adjacentIntervals)
        if step >= now { return bounded(Int64(min(step - now, limit))) }
        return bounded(-Int64(min(now - step, limit)))
    }

    /// `now + drift`, saturating at 0 and at UInt64.max.
    static func centre(now: UInt64, drift: Int64) -> UInt64 {
        if drift >= 0 {
            let (c, overflow) = now.addingReportingOverflow(UInt64(drift))
            return overflow ? UInt64.max : c
        }
        let back = drift.magnitude
        return now >= back ? now - back : 0
    }

    /// A change of learned drift this large (in steps) is logged.
    public static let driftJumpSteps: Int64 = 3
}

/// The HOTP look-ahead (RFC 4226, section 7.4): a token's counter moves on with every button
/// press, logged in or not, so a code is accepted at any of the `size` counters from the next
/// unused one. Every counter of the window is computed and compared, with no early exit, and
/// so is the last used counter, whose match is a replay (never accepted).
public struct HOTPWindow: Sendable {
    public static let defaultSize = 10
    public static let sizeRange: ClosedRange<Int> = 1...100
    /// The largest counter a factor may start at (2^48: no token gets near it, and a scan from
    /// it stays far from every integer's end, in Swift and in SQL).
    public static let maxCounter: UInt64 = 1 << 48

    /// How far past the next unused counter a code may be and still start a resync (RFC 4226,
    /// section 7.4: two consecutive codes; `resync(answer:…)`). 0 turns resync off; at most 1000.
    public static let defaultResync = 100
    public static let resyncRange: ClosedRange<Int> = 0...1000

    public let size: Int
    /// A resync starts at a code of [next + size, next + resync) (`resync(answer:…)`): nothing if
    /// resync <= size.
    public let resync: Int

    public init(size: Int = HOTPWindow.defaultSize, resync: Int = HOTPWindow.defaultResync) throws(MFAError) {
        guard Self.sizeRange.contains(size) else { throw .invalidOption("hotp_window must be 1 to 100") }
        guard Self.resyncRange.contains(resync) else { throw .invalidOption("hotp_resync_window must be 0 to 1000") }
        self.size = size
        self.resync = resync
    }

    /// The counters past the window a resync may start at: [next + size, next + resync), and
    /// below `maxCounter` (a pair's second code is at most `maxCounter`, the fleet's bound too);
    /// nil if none (resync off, or a token at the counters' end).
    func reach(next: UInt64) -> (first: UInt64, last: UInt64)? {
        guard resync > size else { return nil }
        let (first, o1) = next.addingReportingOverflow(UInt64(size))
        let (end, o2) = next.addingReportingOverflow(UInt64(resync - 1))
        let last = min(o2 ? UInt64.max : end, Self.maxCounter - 1)
        guard !o1, first <= last else { return nil }
        return (first, last)
    }

    /// The resync reach's verdict on `answer` (RFC 4226, section 7.4). `far`: it is the code of
    /// a counter past the window within the reach, never accepted alone (a resync's first code).
    /// `pair`: with `previous`, the login's answer before (a far one), c + 1 when `previous` is
    /// the code of a counter c of the reach and `answer` that of c + 1 (the lowest such c): the
    /// counter to record as the last used one, so that neither code works again. Every counter
    /// of the reach and the one after it is computed once and compared with both answers, with
    /// no early exit. Cold (the extra work of an answer no window took), so built small.
    @_optimize(size)
    public func resync(answer: [UInt8], previous: [UInt8]?, key: HMACKey, digits: Int,
                       next: UInt64) -> (far: Bool, pair: UInt64?) {
        guard let (first, last) = reach(next: next) else { return (false, nil) }
        let wanted = TOTPVerifier.parseCode(answer, digits: digits) ?? UInt32.max  // never a code's value
        let wantedFirst = previous.flatMap { TOTPVerifier.parseCode($0, digits: digits) } ?? UInt32.max
        var far: UInt64 = 0
        var found: UInt64 = 0
        var foundMask: UInt64 = 0
        var previousEqual: UInt64 = 0  // all ones when counter - 1, in the reach, is `previous`'s
        var counter = first
        while counter <= last + 1 {  // reach: last < maxCounter
            let value = HOTP.value(key: key, counter: counter, digits: digits)
            let equal = Self.equalMask(value, wanted)
            let inReach: UInt64 = counter <= last ? ~0 : 0
            far |= equal & inReach
            let take = previousEqual & equal & ~foundMask
            found = (found & ~take) | (counter & take)
            foundMask |= take
            previousEqual = Self.equalMask(value, wantedFirst) & inReach
            counter += 1
        }
        return (far != 0, foundMask != 0 ? found : nil)
    }

    /// All ones iff `a == b`, without a branch on either.
    static func equalMask(_ a: UInt32, _ b: UInt32) -> UInt64 {
        let x = UInt64(a ^ b)
        return ((x | (0 &- x)) >> 63) &- 1
    }

    /// The lowest counter in [`next`, `next` + size) whose code is `answer`, and whether
    /// `answer` is the code of `lastUsed` or of a counter skipped since (a replay, never
    /// accepted). The same scan as TOTP's window. Counters past UInt64.max are never reached.
    public func match(answer: [UInt8], key: HMACKey, digits: Int, next: UInt64, lastUsed: UInt64?) -> TOTPVerifier.Match {
        let (end, overflow) = next.addingReportingOverflow(UInt64(size - 1))
        // The last used counter is scanned too when it is the one before `next` (its code is a
        // replay); the scan never grows past the window and one counter.
        let from = lastUsed.map { $0 &+ 1 == next ? $0 : next } ?? next
        // Nothing at or below the last used counter is ever eligible (at UInt64.max: nothing).
        let used = next == 0 ? lastUsed : max(lastUsed ?? 0, next - 1)
        return TOTPVerifier.scan(answer: answer, key: key, digits: digits, from: from,
                                 to: overflow ? UInt64.max : end, usedUpTo: used)
    }
}
