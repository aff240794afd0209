import MFAPolicy

extension Factor {
    /// A token's first unused counter when it was saved (nil for the other kinds).
    var hotpCounter: UInt64? {
        if case .hotp(let h) = data { return h.counter }
        return nil
    }
}
