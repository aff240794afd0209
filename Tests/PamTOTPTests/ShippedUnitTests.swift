import FleetStore
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// The shipped systemd unit's confinement, applied without systemd (no PID 1 here): a small
/// launcher built by the test installs a seccomp filter that, like systemd's
/// RestrictAddressFamilies=, makes socket() fail with EAFNOSUPPORT for every family the unit
/// does not list, then execs pam-totpd. The unit said AF_UNIX only, so in fleet mode the daemon
/// could not reach PostgreSQL over TCP and every login was denied (review).
final class ShippedUnitTests: XCTestCase {
    static let launcherSource = #"""
        #include <errno.h>
        #include <linux/filter.h>
        #include <linux/seccomp.h>
        #include <stddef.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include <sys/prctl.h>
        #include <sys/socket.h>
        #include <sys/syscall.h>
        #include <unistd.h>

        /* restrict-families AF_UNIX,AF_INET,... COMMAND [ARG]... */
        int main(int argc, char **argv) {
            if (argc < 3) { fprintf(stderr, "usage: %s FAMILIES COMMAND...\n", argv[0]); return 2; }
            int families[16], n = 0;
            char *list = strdup(argv[1]);
            for (char *f = strtok(list, ","); f && n < 16; f = strtok(NULL, ",")) {
                if (!strcmp(f, "AF_UNIX")) families[n++] = AF_UNIX;
                else if (!strcmp(f, "AF_INET")) families[n++] = AF_INET;
                else if (!strcmp(f, "AF_INET6")) families[n++] = AF_INET6;
                else if (!strcmp(f, "AF_NETLINK")) families[n++] = AF_NETLINK;
                else { fprintf(stderr, "unknown family %s\n", f); return 2; }
            }
            struct sock_filter code[48];
            int k = 0;
            code[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
            code[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0);
            code[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
            code[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]));
            for (int i = 0; i < n; i++)
                code[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)families[i], (unsigned char)(n - i), 0);
            code[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EAFNOSUPPORT & SECCOMP_RET_DATA));
            code[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
            struct sock_fprog prog = { .len = (unsigned short)k, .filter = code };
            if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) { perror("seccomp"); return 1; }
            execv(argv[2], argv + 2);
            perror("execv");
            return 127;
        }
        """#

    /// The families the shipped unit's RestrictAddressFamilies= lists.
    func unitFamilies() throws -> [String] {
        let unit = try String(contentsOf: packageRoot.appendingPathComponent("systemd/pam-totpd.service"), encoding: .utf8)
        let lines = unit.split(separator: "\n").filter { $0.hasPrefix("RestrictAddressFamilies=") }
        XCTAssertEqual(lines.count, 1, "one RestrictAddressFamilies= line")
        return lines.first.map { $0.dropFirst("RestrictAddressFamilies=".count).split(separator: " ").map(String.init) } ?? []
    }

    /// The shipped unit read as text (no root, no PostgreSQL, so it runs everywhere): its
    /// [Service] section allows the families fleet mode needs to reach PostgreSQL over TCP,
    /// AF_INET and AF_INET6, next to AF_UNIX, and keeps every other line of the confinement.
    /// The unit said AF_UNIX only, and in fleet mode every login was denied (review).
    func testTheUnitAllowsTCPToTheDatabaseAndKeepsItsConfinement() throws {
        let families = try unitFamilies()
        for family in ["AF_UNIX", "AF_INET", "AF_INET6"] {
            XCTAssertTrue(families.contains(family), "RestrictAddressFamilies= lacks \(family): \(families)")
        }
        XCTAssertFalse(families.contains { $0.hasPrefix("~") }, "a list of what is allowed, not of what is denied: \(families)")
        let unit = try String(contentsOf: packageRoot.appendingPathComponent("systemd/pam-totpd.service"), encoding: .utf8)
        var section = "", service: Set<String> = []
        for raw in unit.split(separator: "\n") {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("[") { section = line } else if section == "[Service]" && !line.hasPrefix("#") { service.insert(line) }
        }
        XCTAssertTrue(service.contains { $0.hasPrefix("RestrictAddressFamilies=") }, "in [Service]: \(service.sorted())")
        for line in ["NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/pam-totp", "ProtectHome=yes",
                     "PrivateTmp=yes", "PrivateDevices=yes", "ProtectKernelTunables=yes", "ProtectKernelModules=yes",
                     "ProtectControlGroups=yes", "RestrictNamespaces=yes", "LockPersonality=yes", "MemoryDenyWriteExecute=yes",
                     "RestrictRealtime=yes", "SystemCallArchitectures=native"] {
            XCTAssertTrue(service.contains(line), "[Service] lost \(line): \(service.sorted())")
        }
    }

    func testFleetModeWorksUnderTheShippedUnitsAddressFamilies() throws {
        try XCTSkipUnless(isRoot, "pam-totpd runs as root")
        guard PostgresCluster.available else { return XCTFail("PostgreSQL 15 not found: make check installs postgresql-15") }
        let families = try unitFamilies()
        XCTAssertTrue(families.contains("AF_UNIX"), "\(families)")
        let dir = try makeTemporaryDirectory("pam_totp_unit")
        defer { removeTemporaryDirectory(dir) }
        let launcher = dir.appendingPathComponent("restrict-families").path
        try Self.launcherSource.write(toFile: launcher + ".c", atomically: true, encoding: .utf8)
        let cc = try runCommand(["gcc", "-O1", "-o", launcher, launcher + ".c"])
        XCTAssertEqual(cc.status, 0, cc.stderr)

        let port = try freeTCPPort()
        let cluster = try PostgresCluster(port: port, listen: "127.0.0.1")
        defer { cluster.stop() }
        try cluster.psql("CREATE DATABASE fleet")
        _ = try Migrator.migrate(conninfo: cluster.conninfo(database: "fleet"))
        try cluster.psql("CREATE ROLE unit_host LOGIN; GRANT pam_totp_host TO unit_host", database: "fleet")

        // Over TCP, as a fleet host reaches its database.
        func start(_ allowed: [String]) throws -> DaemonFixture {
            let daemon = try DaemonFixture()
            try "backend = postgresql\npostgresql = host=127.0.0.1 port=\(port) user=unit_host dbname=fleet\n"
                .write(toFile: daemon.config, atomically: true, encoding: .utf8)
            XCTAssertEqual(chmod(daemon.config, 0o644), 0)
            try daemon.start(launcher: [launcher, allowed.joined(separator: ",")])
            return daemon
        }
        // What the unit said before: AF_UNIX only. The daemon cannot reach the database.
        XCTAssertThrowsError(try start(["AF_UNIX"]).cleanup(), "fleet mode under AF_UNIX only") { error in
            XCTAssertTrue("\(error)".contains("cannot reach the database"), "\(error)")
        }
        // The shipped unit's families: it starts and answers from the database.
        let daemon = try start(families)
        defer { daemon.cleanup() }
        var o = ModuleOptions()
        o.backend = .postgresql
        let frame = try XCTUnwrap(DaemonRequest(operation: .lookup, service: Array("unit".utf8), user: Array("root".utf8),
                                                options: o, answer: []).encoded())
        let fd = DaemonTests.connectTo(daemon.socketPath)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        XCTAssertTrue(DaemonTests.send(fd, frame))
        let reply = try DaemonReply.decode(try XCTUnwrap(DaemonTests.readAll(fd), "no reply"))
        XCTAssertEqual(reply, .outcome(.unenrolled), daemon.output)
    }
}
