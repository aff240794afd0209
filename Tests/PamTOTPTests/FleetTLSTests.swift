import FleetStore
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// A host reaching the database over TCP with TLS `verify-full` and a client certificate
/// (docs/ARCHITECTURE.md, section 8, docs/FLEET.md): a test CA made with Debian's openssl, the server
/// on 127.0.0.1 accepting only `hostssl … cert` for TCP, pam-totpd with the certificate's CN as
/// its role. The same daemon with the wrong CA, or a wrong server name, refuses to start.
final class FleetTLSTests: XCTestCase {
    var cluster: PostgresCluster!
    var pki: URL!
    var host: DaemonFixture?
    let db = "fleet"
    let role = "pamtotp_fleet_tls_host"
    var port = 0

    func openssl(_ args: [String]) throws {
        let r = try runCommand(["openssl"] + args)
        guard r.status == 0 else { throw ClusterError("openssl \(args.first ?? ""): \(r.stderr)") }
    }

    override func setUpWithError() throws {
        guard PostgresCluster.available else {
            XCTFail("PostgreSQL 15 not found: make check installs postgresql-15")
            throw XCTSkip("no PostgreSQL")
        }
        pki = try makeTemporaryDirectory("pamtotp-fleet-pki")
        func f(_ name: String) -> String { pki.appendingPathComponent(name).path }
        // A CA, the server's certificate for 127.0.0.1 / localhost, the host's for its role, and a second CA.
        for ca in ["ca", "otherca"] {
            try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                         "-subj", "/CN=pam_totp test \(ca)", "-keyout", f("\(ca).key"), "-out", f("\(ca).crt")])
        }
        try "subjectAltName = IP:127.0.0.1, DNS:localhost\n".write(toFile: f("server.ext"), atomically: true, encoding: .utf8)
        for (name, cn) in [("server", "localhost"), ("client", role)] {
            try openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=\(cn)",
                         "-keyout", f("\(name).key"), "-out", f("\(name).csr")])
            try openssl(["x509", "-req", "-in", f("\(name).csr"), "-CA", f("ca.crt"), "-CAkey", f("ca.key"), "-CAcreateserial",
                         "-days", "2", "-out", f("\(name).crt")] + (name == "server" ? ["-extfile", f("server.ext")] : []))
        }
        chmod(f("client.key"), 0o600)
        port = try freeTCPPort()
        cluster = try PostgresCluster(port: port, listen: "127.0.0.1")
        // The server's key and certificates inside its data directory, owned by postgres.
        let data = cluster.dataDirectory
        for name in ["server.key", "server.crt", "ca.crt"] {
            try FileManager.default.copyItem(atPath: f(name), toPath: data + "/" + name)
            _ = try runCommand(["chown", "postgres:postgres", data + "/" + name])
        }
        chmod(data + "/server.key", 0o600)
        try """
            local all all trust
            hostssl all all 127.0.0.1/32 cert
            host all all 0.0.0.0/0 reject

            """.write(toFile: data + "/pg_hba.conf", atomically: true, encoding: .utf8)
        _ = try runCommand(["chown", "postgres:postgres", data + "/pg_hba.conf"])
        try """
            ssl = on
            ssl_cert_file = 'server.crt'
            ssl_key_file = 'server.key'
            ssl_ca_file = 'ca.crt'

            """.appendLine(to: data + "/postgresql.conf")
        try cluster.stopServer()
        try cluster.start()
        try cluster.psql("CREATE DATABASE \(db)")
        _ = try Migrator.migrate(conninfo: cluster.conninfo(database: db))
        try cluster.psql("CREATE ROLE \(role) LOGIN; GRANT pam_totp_host TO \(role)", database: db)
    }

    override func tearDown() {
        host?.cleanup()
        cluster?.stop()
        if let pki { removeTemporaryDirectory(pki) }
    }

    func conninfo(ca: String = "ca.crt", hostName: String = "127.0.0.1") -> String {
        "host=\(hostName) hostaddr=127.0.0.1 port=\(port) dbname=\(db) user=\(role) sslmode=verify-full "
            + "sslrootcert=\(pki.appendingPathComponent(ca).path) sslcert=\(pki.appendingPathComponent("client.crt").path) "
            + "sslkey=\(pki.appendingPathComponent("client.key").path)"
    }

    func testVerifyFullWithAClientCertificate() throws {
        let secret = Array("fleettlssecret123456".utf8)
        try enrollRoot(secret)
        let h = try startHost(conninfo())
        host = h
        let service = "pam_totp_fleet_tls_\(getpid())"
        try "auth required \(moduleURL.path) config=\(h.config) socket=\(h.socketPath)\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        defer { unlink("/etc/pam.d/" + service) }
        let code = String(decoding: try currentCode(secret, offsetSteps: 1), as: UTF8.self)
        let ok = try runCommand(["pamtester", service, "root", "authenticate"], input: code + "\n")
        XCTAssertEqual(ok.status, 0, ok.stdout + ok.stderr + h.output)
        let again = try runCommand(["pamtester", service, "root", "authenticate"], input: code + "\n")
        XCTAssertNotEqual(again.status, 0)
        // The daemon's session really is TLS, as the certificate's role.
        XCTAssertEqual(try cluster.psql("SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE s.ssl AND a.usename = '\(role)'",
                                        database: db), "1")
    }

    func testWrongCAOrServerNameRefusesToStart() throws {
        let socket = pki.appendingPathComponent("s").path
        for (conn, why) in [(conninfo(ca: "otherca.crt"), "certificate verify failed"),
                            (conninfo(hostName: "wrong-name.invalid"), "does not match")] {
            let config = pki.appendingPathComponent("bad.conf").path
            try "backend = postgresql\npostgresql = \(conn)\n".write(toFile: config, atomically: true, encoding: .utf8)
            chmod(config, 0o644)
            let r = try runCommand([daemonURL.path, "--config", config, "--socket", socket])
            XCTAssertNotEqual(r.status, 0)
            XCTAssertTrue(r.stderr.contains("cannot reach the database"), r.stderr)
            XCTAssertTrue(r.stderr.contains(why), "\(why): \(r.stderr)")
        }
    }

    /// A long link (issue 38, item 5): 200 ms round trips (scripts/delay-proxy.py, 100 ms each
    /// way; this kernel has no netem). Before, pam-totpd's 1 s connect deadline could not cover
    /// a TLS connect (it did not start: "timed out connecting"), and every connect paid one more
    /// round trip for a HelloRetryRequest (PostgreSQL 15 takes prime256v1 only; OpenSSL 3 sends
    /// an X25519 key share first). Now it starts (db_connect_timeout, 5 s), its TLS hello offers
    /// P-256 first (no retry; an admin's own OPENSSL_CONF is left alone: with Debian's, the retry
    /// is there), and a warm login is one round trip.
    func testOverALongLinkTLSConnectsWithoutARetryAndALoginIsOneRoundTrip() throws {
        let secret = Array("fleettlslongsecret12".utf8)
        try enrollRoot(secret)
        let proxyPort = try freeTCPPort()
        let log = pki.appendingPathComponent("link.log").path
        let null = open("/dev/null", O_RDWR)
        defer { close(null) }
        let proxy = SpawnedProcess()
        try proxy.run(["/usr/bin/python3", packageRoot.appendingPathComponent("scripts/delay-proxy.py").path, String(proxyPort), "127.0.0.1",
                       String(port), "100", log], stdio: null)
        defer { proxy.terminate(); proxy.waitUntilExit() }
        func lines() -> [Substring] { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n") }
        XCTAssertTrue(waitUntil(timeout: 10) { lines().contains("listening") }, "the delay proxy listens")
        let far = conninfo().replacingOccurrences(of: "port=\(port)", with: "port=\(proxyPort)")

        // With the admin's own OpenSSL configuration (Debian's): the server asks the hello again.
        try startHost(far, launcher: ["/usr/bin/env", "OPENSSL_CONF=/usr/lib/ssl/openssl.cnf"]).cleanup()
        XCTAssertTrue(lines().contains("hello-retry"), "Debian's OpenSSL defaults: a HelloRetryRequest")

        let start = lines().count
        let h = try startHost(far)
        host = h
        XCTAssertFalse(lines().dropFirst(start).contains("hello-retry"), "P-256 offered first: no retry")
        // A warm login (the connection made at start): one flight out, one back.
        awayFromStepBoundary(margin: 5)
        let before = lines().count
        let code = String(decoding: try currentCode(secret, offsetSteps: 0), as: UTF8.self)
        let reply = try askFleetDaemon(h.socketPath, .authenticate, service: "fleet-tls", answer: code)
        guard case .outcome(.success) = reply else { return XCTFail("\(reply): \(h.output)") }
        var flights = 0, last = ""
        for line in lines().dropFirst(before) {
            let direction = String(line.prefix(3))
            if direction == "c2s" && last != "c2s" { flights += 1 }
            if direction == "c2s" || direction == "s2c" { last = direction }
        }
        XCTAssertEqual(flights, 1, "a warm login is one round trip: \(Array(lines().dropFirst(before)))")
    }

    /// Root's phone factor of `secret`, enrolled as the database's owner.
    func enrollRoot(_ secret: [UInt8]) throws {
        var rng = SystemRandomNumberGenerator()
        try PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
            .enroll(user: Array("root".utf8), accountUID: 0,
                    factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0, secret: secret),
                    importedCodes: nil, using: &rng)
    }

    /// A pam-totpd on `conn`, started (through `launcher`, if given); the caller cleans it up.
    func startHost(_ conn: String, launcher: [String] = []) throws -> DaemonFixture {
        let h = try DaemonFixture()
        do {
            try "backend = postgresql\npostgresql = \(conn)\n".write(toFile: h.config, atomically: true, encoding: .utf8)
            chmod(h.config, 0o644)
            try h.start(launcher: launcher)
        } catch {
            h.cleanup()
            throw error
        }
        return h
    }
}
