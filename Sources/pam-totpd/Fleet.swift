import FleetStore
import CLibc
import MFADaemon
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `pam-totpd init-database --admin CONNINFO`: creates or upgrades the fleet schema
/// (sql/migrations, embedded) and the roles pam_totp_host and pam_totp_admin; idempotent.
struct InitDatabase: Command {
    static let name = "init-database"
    static let abstract = "Create or upgrade the fleet schema and the roles pam_totp_host and pam_totp_admin (idempotent)."
    static let specs: [ArgumentSpec] = [
        .option("--admin", "CONNINFO", "A libpq CONNINFO of a role that may create schemas, extensions and roles (keep passwords in ~/.pgpass, not here).",
                required: true),
    ]

    let admin: String

    init(_ arguments: Arguments) throws(CommandError) { admin = try arguments.required("--admin") }

    func run() throws(CommandError) {
        Logger.bootstrap()
        let logger = Logger()
        do throws(DaemonError) { try AdminDatabase.check(admin) } catch {
            printError(error.text)
            throw .exit(1)
        }
        let result: Result<(from: Int, to: Int), PQError>
        do throws(PQError) { result = .success(try Migrator.migrate(conninfo: admin)) } catch { result = .failure(error) }
        switch result {
        case .success(let (from, to)):
            let text = from == to ? "the schema is at version \(to): nothing to do"
                : "the schema went from version \(from) to \(to)"
            print("pam-totpd: " + text)
            logger.notice("init-database: \(text)")
        case .failure(let e):
            printError("init-database failed: \(e.message)")
            logger.error("init-database failed: \(e.message)")
            throw .exit(1)
        }
    }
}

/// `pam-totpd import-files --config FILE DIR`: moves a file store into the database.
struct ImportFiles: Command {
    static let name = "import-files"
    static let abstract = "Move a file store (factors, used steps, recovery codes, failure counts) into the database."
    // `--config FILE`: the configuration naming the database (backend = postgresql); also
    // accepted before the subcommand's name (`pam-totpd --config FILE import-files DIR`).
    static let specs: [ArgumentSpec] = [.argument("DIR", "The file store's directory (e.g. /var/lib/pam-totp)."), PamTOTPD.configSpec]

    let directory: String
    let config: String?

    init(_ arguments: Arguments) throws(CommandError) {
        directory = try arguments.required("DIR")
        config = arguments.string("--config")
    }

    func run() throws(CommandError) {
        let (files, store): (Store, PostgresStore)
        do throws(DaemonError) {
            (files, store) = try open()
        } catch {
            printError(error.text)
            throw .exit(1)
        }
        let report = FileImport.run(from: files, directory: Array(directory.utf8), to: store)
        for line in report.lines { print("pam-totpd: " + line) }
        print("pam-totpd: imported \(report.imported) user(s), \(report.failed) failed")
        if report.failed > 0 { throw .exit(1) }
    }

    /// The file store to read and the database to write, or why not.
    func open() throws(DaemonError) -> (Store, PostgresStore) {
        guard geteuid() == 0 else { throw DaemonError("must run as root (it reads the root-only store)") }
        guard let config else { throw DaemonError("import-files needs --config FILE (backend = postgresql)") }
        let site = try PamTOTPD.siteOptions(config)
        guard site.backend == .postgresql else { throw DaemonError("\(config) does not say backend = postgresql") }
        let store = try PamTOTPD.fleetStore(site: site, configPath: config, workers: 1)
        do throws(MFAError) {
            return (try Store(path: Array(directory.utf8)), store)
        } catch {
            throw DaemonError("cannot open the file store \(directory): \(error)")
        }
    }
}
