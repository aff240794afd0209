// TEMPORARY (uncommitted): replaced by the helper's Text.swift.
public func isPrintableText(_ bytes: [UInt8]) -> Bool {
    for c in bytes where c < 0x20 || c == 0x7F { return false }
    return true
}
public func escapedForTerminal(_ bytes: [UInt8]) -> [UInt8] { bytes.map { $0 < 0x20 || $0 == 0x7F ? 0x3F : $0 } }
