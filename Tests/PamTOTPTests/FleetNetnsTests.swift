import FleetStore
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// Two hosts and a database on a real network path (docs/ARCHITECTURE.md, section 8): three network
/// namespaces made here (pamtotp-fleet-*), a veth pair from each host's to the database's, the
/// server listening only on its veth addresses with TLS, each pam-totpd in its host's namespace
/// with `sslmode=verify-full` and a client certificate for its own host role. A code used on A
/// is refused on B, 20 concurrent logins with one code over both give one success in each of 100
/// rounds (each round its own factor and step, no waiting for the clock),
/// and failures are counted exactly across hosts. Everything is removed in tearDown.
final class FleetNetnsTests: XCTestCase {
    var cluster: PostgresCluster?
    var pki: URL!
    var hosts: [DaemonFixture] = []
    var namespaces: [String] = []
    let db = "fleet"
    let tag = String(getpid() % 100_000)
    let secret = Array("fleetnetnssecret1234".utf8)
    /// Factors of root's used only by the race rounds. One factor with window ±10 gives about
    /// 21 steps above its last used one; these give 100 rounds distinct (factor, step) pairs
    /// without waiting for the clock (a user may have 32 factors).
    let raceSecrets = (0..<8).map { Array("fleetnetnsrace\($0)-secret".utf8) }
    let window: Int64 = 10
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
        let owner = PostgresStore(pool: ConnectionPool(conninfo: c.conninfo(database: db)))
        for (label, s) in [("phone", secret)] + raceSecrets.enumerated().map({ ("race\($0.offset)", $0.element) }) {
            try owner.enroll(user: Array("root".utf8), accountUID: 0,
                             factor: try Factor(label: Array(label.utf8), parameters: .default, created: 0, secret: s),
                             importedCodes: nil, using: &rng)
        }
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

    func ask(_ i: Int, answer: String, user: String = "root", previous: String = "") throws -> DaemonReply {
        var o = ModuleOptions()
        o.backend = .postgresql
        o.adjacentIntervals = 10
        o.maxFailures = 100
        o.lockoutSeconds = 0
        let frame = try XCTUnwrap(DaemonRequest(operation: .authenticate, service: Array("fleet-netns".utf8), user: Array(user.utf8),
                                                options: o, answer: Array(answer.utf8), previous: Array(previous.utf8)).encoded())
        let fd = DaemonTests.connectTo(hosts[i].socketPath)
        guard fd >= 0 else { throw ClusterError("connect to host \(i)") }
        defer { close(fd) }
        _ = DaemonTests.send(fd, frame)
        return try DaemonReply.decode(try XCTUnwrap(DaemonTests.readAll(fd)))
    }

    func code(_ offset: Int64) throws -> String { String(decoding: try currentCode(secret, offsetSteps: offset), as: UTF8.self) }
    /// A code no factor of root's has anywhere near the window.
    func wrongCode() throws -> String {
        var taken = Set<String>()
        for s in [secret] + raceSecrets {
            for o in -(window + 3)...(window + 3) { taken.insert(String(decoding: try currentCode(s, offsetSteps: o), as: UTF8.self)) }
        }
        while true {
            let candidate = String(format: "%06u", UInt32.random(in: 0..<1_000_000))
            if !taken.contains(candidate) { return candidate }
        }
    }
    /// 20 requests with one answer, released at once, alternating between the hosts: per
    /// request 1 success, 0 any other reply, -1 no reply.
    func race(answer: String, user: String = "root") -> [Int] {
        let results = Slots(20)
        let group = DispatchGroup()
        let gate = DispatchSemaphore(value: 0)
        for w in 0..<20 {
            group.enter()
            Thread.detachNewThread {
                gate.wait()  // all 20 go at once
                let r = try? self.ask(w % 2, answer: answer, user: user)
                results.set(w, r == nil ? -1 : (self.isSuccess(r) ? 1 : 0))
                group.leave()
            }
        }
        for _ in 0..<20 { gate.signal() }
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        return results.all
    }

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
        // 20 concurrent logins with one code over both hosts: one success per round, 100 rounds.
        // Each round has its own (factor, step): the step above every step used before on that
        // factor, and at least `margin` steps inside the window around the current step, checked
        // again at each round, so a 30 s boundary crossed during the test cannot push it out.
        // A code that any factor (phone included) would accept at another step in reach is
        // skipped: that would be a second valid login, not a race.
        let rounds = 100, margin: Int64 = 2
        let all = [secret] + raceSecrets
        func hotp(_ s: [UInt8], _ step: Int64) throws -> String {
            String(decoding: try TOTP.code(secret: s, parameters: .default, at: step * 30), as: UTF8.self)
        }
        let start = Date()
        var next = [Int64](repeating: 0, count: raceSecrets.count)  // per race factor: lowest step not yet used
        var perRound: [Int] = [], hostOfSuccess: [Int] = [0, 0], plan: [(factor: Int, step: Int64)] = []
        for round in 1...rounds {
            let now = Int64(time(nil)) / 30
            // The lowest usable step of any race factor, steps skipped for a colliding code.
            var choice: (factor: Int, step: Int64, code: String)?
            while choice == nil {
                let candidates = (0..<raceSecrets.count).map { ($0, max(next[$0], now - window + margin)) }
                    .filter { $0.1 <= now + window - margin }
                guard let (f, step) = candidates.min(by: { $0.1 < $1.1 || ($0.1 == $1.1 && $0.0 < $1.0) }) else {
                    return XCTFail("round \(round): no (factor, step) left in the window: rounds took too long")
                }
                next[f] = step + 1
                let c = try hotp(raceSecrets[f], step)
                var clash = false
                for (i, s) in all.enumerated() {
                    for other in (now - window - margin)...(now + window + margin) where !(i == f + 1 && other == step) {
                        if try hotp(s, other) == c { clash = true }
                    }
                }
                if !clash { choice = (f, step, c) }
            }
            guard let (f, step, c) = choice else { return XCTFail("round \(round)") }
            XCTAssertTrue(abs(step - now) <= window - margin, "round \(round): step \(step) at \(now)")
            plan.append((f, step))
            let values = race(answer: c)
            XCTAssertFalse(values.contains(-1), "round \(round): a request failed")
            perRound.append(values.filter { $0 == 1 }.count)
            for (w, v) in values.enumerated() where v == 1 { hostOfSuccess[w % 2] += 1 }
        }
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertEqual(perRound.count, rounds)
        XCTAssertEqual(perRound, Array(repeating: 1, count: rounds), "exactly one success in each round")
        XCTAssertEqual(Set(plan.map { "\($0.factor):\($0.step)" }).count, rounds, "every round had its own (factor, step)")
        // The database agrees: each race factor's last step is the highest step a round gave it.
        for f in 0..<raceSecrets.count {
            let used = plan.filter { $0.factor == f }.map(\.step).max()
            XCTAssertEqual(try cluster!.psql("SELECT last_step FROM pam_totp_api.list_factors('root') WHERE label = 'race\(f)'", database: db),
                           used.map { String($0) } ?? "0", "race\(f)")
        }
        let histogram = Dictionary(grouping: perRound, by: { $0 }).mapValues(\.count).sorted { $0.key < $1.key }
            .map { "\($0.key) success: \($0.value) rounds" }.joined(separator: ", ")
        print("fleet netns: \(rounds) rounds x 20 concurrent logins over two hosts in \(String(format: "%.1f", elapsed)) s; "
              + "successes per round \(perRound); histogram: \(histogram); successes on host A \(hostOfSuccess[0]), B \(hostOfSuccess[1]); "
              + "factors used \(Dictionary(grouping: plan, by: \.factor).mapValues(\.count).sorted { $0.key < $1.key }.map { "race\($0.key)x\($0.value)" })")
        // Failures counted exactly across hosts.
        _ = try ask(0, answer: try code(6))  // a success: the count starts at 0
        for i in 0..<10 {
            guard case .outcome(.wrongCode(false, let f, _)) = try ask(i % 2, answer: try wrongCode()) else { return XCTFail("wrong \(i)") }
            XCTAssertEqual(f, UInt32(i + 1))
        }
        XCTAssertEqual(try failures(), "10")
    }

    /// A hardware token's code (HOTP) sent by 20 logins at once over both hosts: exactly one
    /// success in each of 20 rounds, the counter where the last round left it; a resync begun
    /// on one host is finished on the other (the pair is checked in one statement).
    func testOneHOTPCodeOverTwoHostsLogsInOnceAndResyncsAcrossHosts() throws {
        let user = "nobody"
        guard let pw = getpwnam(user) else { throw XCTSkip("no account nobody") }
        let token = Array("fleetnetnshotptoken1".utf8)
        var rng = SystemRandomNumberGenerator()
        let owner = PostgresStore(pool: ConnectionPool(conninfo: cluster!.conninfo(database: db)))
        try owner.enroll(user: Array(user.utf8), accountUID: pw.pointee.pw_uid,
                         factor: try Factor(kind: .hotp, label: Array("fob".utf8), parameters: .default, created: 0, counter: 0, secret: token),
                         importedCodes: nil, using: &rng)
        func code(_ c: UInt64) -> String { String(decoding: HOTP.code(key: HMACKey(algorithm: .sha1, key: token), counter: c, digits: 6), as: UTF8.self) }
        for round in 1...20 {
            let values = race(answer: code(UInt64(round) * 3), user: user)  // two presses lost between rounds: in the window
            XCTAssertFalse(values.contains(-1), "round \(round): a request failed")
            XCTAssertEqual(values.filter { $0 == 1 }.count, 1, "round \(round): exactly one of 20")
        }
        XCTAssertEqual(try cluster!.psql("SELECT last_step FROM pam_totp_api.list_factors('\(user)')", database: db), "60")
        // Resync: a far code on A is refused and asks for the next one; that pair on B logs in.
        guard case .outcome(.resyncNeeded) = try ask(0, answer: code(100), user: user) else { return XCTFail("a far code on A") }
        XCTAssertTrue(isSuccess(try ask(1, answer: code(101), user: user, previous: code(100))), "the pair on B")
        guard case .outcome(.wrongCode(replayed: true, _, _)) = try ask(0, answer: code(101), user: user) else {
            return XCTFail("A accepted a code B used")
        }
        XCTAssertEqual(try cluster!.psql("SELECT last_step FROM pam_totp_api.list_factors('\(user)')", database: db), "101")
    }
}

extension FleetNetnsTests: @unchecked Sendable {}
