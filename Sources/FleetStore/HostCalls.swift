import MFACrypto

extension PQValue {
    /// The argument as identify's MAC covers it (sql/api.sql; HostCredential): text as it is;
    /// a bytea in lower-case hex; an array as each element's length in bytes, ':' and it. nil:
    /// NULL.
    var canonical: String? {
        func joined(_ items: [String]) -> String { items.map { String($0.utf8.count) + ":" + $0 }.joined() }
        switch self {
        case .text(let s): return s
        case .bytea(let b): return hex(b)
        case .byteaArray(let a): return joined(a.map(hex))
        case .textArray(let a): return joined(a)
        case .null: return nil
        }
    }
}

extension HostCredential {
    /// The credential of one call of `operation` with `arguments` (as the function takes them).
    public func credential(operation: String, arguments: [PQValue], stamp: Int64, nonce: [UInt8]) -> String {
        credential(operation: operation, arguments: arguments.map { $0.canonical }, stamp: stamp, nonce: nonce)
    }
}
