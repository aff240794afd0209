import CFleetSQL

/// The fleet schema's SQL, embedded in pam-totpd at build time (Sources/CFleetSQL reads
/// sql/migrations/*.sql and sql/api.sql): init-database applies the migrations in order, then
/// re-creates the API (docs/ARCHITECTURE.md, section 8).
public enum Migrations {
    public static let all: [(version: Int, name: String, sql: String)] = {
        var count: UInt = 0
        guard let files = fleet_sql_migrations(&count) else { return [] }
        return UnsafeBufferPointer(start: files, count: Int(count)).map(file)
    }()

    /// sql/api.sql: every function's current body, in the schema pam_totp_api.
    public static let api: String = fleet_sql_api().map { file($0.pointee).sql } ?? ""

    private static func file(_ f: fleet_sql_file) -> (version: Int, name: String, sql: String) {
        let bytes = UnsafeBufferPointer(start: f.bytes, count: Int(f.length))
        return (Int(f.version), f.name.map { String(cString: $0) } ?? "", String(decoding: bytes, as: UTF8.self))
    }
}
