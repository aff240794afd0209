import FleetStore
import Foundation
import MFACore
import TestSupport
import XCTest

/// Two hosts and a database on a real network path (docs/ARCHITECTURE.md §8): three network
/// namespaces made here (pamtotp-fleet-*), a veth pair from each host's to the database's, the
/// server listening only on its veth addresses with TLS, each pam-totpd in its host's namespace
/// with `sslmode=verify-full` and a client certificate for its own host role. A code used on A
/// is refused on B, 20 concurrent logins with one code over both give one success per round,
/// and failures are counted exactly across hosts. Everything is removed in tearDown.
final class FleetNetnsTests: XCTestCase {
    var cluster: PostgresCluster?
    var pki: URL!
    var hosts: [DaemonFixture] = []
    var namespaces: [String] = []
    let db = "fleet"
    let tag = String(getpid() % 100_000)
    let secret = Array("fleetnetnssecret1234".utf8)
    var roles: [String] { ["pamtotp_fleet_ns_a", "pamtotp_fleet_ns_b"] }
    func dbAddress(_ i: Int) -> String { "10.231.\(i + 1).1" }

    func run(_ args: [String]) throws {
        let r = try runCommand(args)
        guard r.status == 0 else { throw ClusterError("\(args.joined(separator: " ")): \(r.stderr)") }
    }

    override func setUpWithError() throws {
        guard PostgresCluster.available else {
            XCTFail("PostgreSQL 15 not found: make check installs postgresql-15")
            throw XCTSkip("no PostgreSQL")
        }
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip") else {
            XCTFail("ip not found: make check installs iproute2")
            throw XCTSkip("no ip")
        }
        let dbNS = "pamtotp-fleet-db-\(tag)"
        for ns in [dbNS, "pamtotp-fleet-a-\(tag)", "pamtotp-fleet-b-\(tag)"] {
            try run(["ip", "netns", "add", ns])
            namespaces.append(ns)
            try run(["ip", "-n", ns, "link", "set", "lo", "up"])
        }
        for i in 0..<2 {
            let (d, h) = ("ptfd\(i)\(tag)", "ptfh\(i)\(tag)")
            try run(["ip", "link", "add", d, "type", "veth", "peer", "name", h])
            try run(["ip", "link", "set", d, "netns", dbNS])
            try run(["ip", "link", "set", h, "netns", namespaces[1 + i]])
            try run(["ip", "-n", dbNS, "addr", "add", dbAddress(i) + "/24", "dev", d])
            try run(["ip", "-n", namespaces[1 + i], "addr", "add", "10.231.\(i + 1).2/24", "dev", h])
            try run(["ip", "-n", dbNS, "link", "set", d, "up"])
            try run(["ip", "-n", namespaces[1 + i], "link", "set", h, "up"])
        }
        // The PKI: a CA, the server's certificate for both its addresses, a client certificate per host role.
        pki = try makeTemporaryDirectory("pamtotp-fleet-pki")
        func f(_ name: String) -> String { pki.appendingPathComponent(name).path }
        func openssl(_ args: [String]) throws { try run(["openssl"] + args) }
        try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                     "-subj", "/CN=pam_totp netns test CA", "-keyout", f("ca.key"), "-out", f("ca.crt")])
        try "subjectAltName = IP:\(dbAddress(0)), IP:\(dbAddress(1))\n".write(toFile: f("server.ext"), atomically: true, encoding: .utf8)
        for (name, cn) in [("server", "db"), ("a", roles[0]), ("b", roles[1])] {
            try openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=\(cn)",
                         "-keyout", f("\(name).key"), "-out", f("\(name).csr")])
            try openssl(["x509", "-req", "-in", f("\(name).csr"), "-CA", f("ca.crt"), "-CAkey", f("ca.key"), "-CAcreateserial",
                         "-days", "2", "-out", f("\(name).crt")] + (name == "server" ? ["-extfile", f("server.ext")] : []))
            chmod(f("\(name).key"), 0o600)
        }
        let c = try PostgresCluster(listen: "\(dbAddress(0)),\(dbAddress(1))",
                                    extraConfig: ["ssl = on", "ssl_cert_file = 'server.crt'", "ssl_key_file = 'server.key'", "ssl_ca_file = 'ca.crt'"],
                                    launcher: ["/usr/sbin/ip", "netns", "exec", dbNS]) { c in
            for name in ["server.key", "server.crt", "ca.crt"] {
                try FileManager.default.copyItem(atPath: f(name), toPath: c.dataDirectory + "/" + name)
                try self.run(["chown", "postgres:postgres", c.dataDirectory + "/" + name])
            }
            chmod(c.dataDirectory + "/server.key", 0o600)
            try "local all all trust\nhostssl all all 10.231.0.0/16 cert\n".write(toFile: c.dataDirectory + "/pg_hba.conf", atomically: true, encoding: .utf8)
            try self.run(["chown", "postgres:postgres", c.dataDirectory + "/pg_hba.conf"])
        }
        cluster = c
        try c.psql("CREATE DATABASE \(db)")
        _ = try Migrator.migrate(conninfo: c.conninfo(database: db))
        try c.psql("UPDATE pam_totp.settings SET max_window = 10, max_failures = 100, min_lockout = 0", database: db)
        for (i, role) in roles.enumerated() {
            try c.psql("CREATE ROLE \(role) LOGIN; GRANT pam_totp_host TO \(role)", database: db)
            let host = try DaemonFixture()
            let name = i == 0 ? "a" : "b"
            try """
                backend = postgresql
                postgresql = host=\(dbAddress(i)) port=\(c.port) dbname=\(db) user=\(role) sslmode=verify-full sslrootcert=\(f("ca.crt")) sslcert=\(f("\(name).crt")) sslkey=\(f("\(name).key"))
                adjacent_intervals = 10
                max_failures = 100
                lockout = 0

                """.write(toFile: host.config, atomically: true, encoding: .utf8)
            chmod(host.config, 0o644)
            hosts.append(host)
            try host.start(launcher: ["/usr/sbin/ip", "netns", "exec", namespaces[1 + i]])
        }
        var rng = SystemRandomNumberGenerator()
        try PostgresStore(pool: ConnectionPool(conninfo: c.conninfo(database: db)))
            .enroll(user: Array("root".utf8), accountUID: 0,
                    factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0, secret: secret),
                    importedCodes: nil, using: &rng)
    }

    override func tearDown() {
        for h in hosts { h.cleanup() }
        hosts = []
        cluster?.stop()
        cluster = nil
        for ns in namespaces { _ = try? runCommand(["ip", "netns", "del", ns]) }
        namespaces = []
        if let pki { removeTemporaryDirectory(pki) }
    }

    func ask(_ i: Int, answer: String) throws -> DaemonReply {
        var o = ModuleOptions()
        o.backend = .postgresql
        o.adjacentIntervals = 10
        o.maxFailures = 100
        o.lockoutSeconds = 0
        let frame = try XCTUnwrap(DaemonRequest(operation: .authenticate, service: Array("fleet-netns".utf8), user: Array("root".utf8),
                                                options: o, answer: Array(answer.utf8)).encoded())
        let fd = DaemonTests.connectTo(hosts[i].socketPath)
        guard fd >= 0 else { throw ClusterError("connect to host \(i)") }
        defer { close(fd) }
        _ = DaemonTests.send(fd, frame)
        return try DaemonReply.decode(try XCTUnwrap(DaemonTests.readAll(fd)))
    }

    func code(_ offset: Int64) throws -> String { String(decoding: try currentCode(secret, offsetSteps: offset), as: UTF8.self) }
    func isSuccess(_ r: DaemonReply?) -> Bool { if case .outcome(.success)? = r { return true }; return false }
    func failures() throws -> String { try cluster!.psql("SELECT failures FROM pam_totp.users WHERE name = 'root'", database: db) }

    func testTwoHostsOverVethWithVerifyFull() throws {
        // A code used on A is refused on B.
        let c = try code(-4)
        XCTAssertTrue(isSuccess(try ask(0, answer: c)))
        guard case .outcome(.wrongCode(replayed: true, _, _)) = try ask(1, answer: c) else { return XCTFail("B accepted A's code") }
        // Each host's session comes over its own veth, over TLS, as its own role.
        XCTAssertEqual(try cluster!.psql("""
            SELECT string_agg(a.usename || '@' || host(a.client_addr) || ':' || s.ssl, ' ' ORDER BY a.usename)
              FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.usename LIKE 'pamtotp_fleet_ns_%'
            """, database: db), "\(roles[0])@10.231.1.2:true \(roles[1])@10.231.2.2:true")
        // 20 concurrent logins with one code over both hosts: one success per round.
        var perRound: [Int] = []
        for round in 1...8 {
            let c = try code(Int64(round - 3))
            let results = Slots(20)
            let group = DispatchGroup()
            for w in 0..<20 {
                group.enter()
                Thread.detachNewThread {
                    let r = try? self.ask(w % 2, answer: c)
                    results.set(w, r == nil ? -1 : (self.isSuccess(r) ? 1 : 0))
                    group.leave()
                }
            }
            XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
            XCTAssertFalse(results.all.contains(-1))
            perRound.append(results.all.filter { $0 == 1 }.count)
        }
        XCTAssertEqual(perRound, Array(repeating: 1, count: 8))
        // Failures counted exactly across hosts.
        _ = try ask(0, answer: try code(6))  // a success: the count starts at 0
        for i in 0..<10 {
            guard case .outcome(.wrongCode(false, let f, _)) = try ask(i % 2, answer: try codeOutsideWindow(secret)) else { return XCTFail("wrong \(i)") }
            XCTAssertEqual(f, UInt32(i + 1))
        }
        XCTAssertEqual(try failures(), "10")
        print("fleet netns: two hosts over veth with verify-full: 8 rounds x 20 concurrent logins, successes per round \(perRound)")
    }
}

extension FleetNetnsTests: @unchecked Sendable {}
