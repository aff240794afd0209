import XCTest
import TestSupport
@testable import MFADaemon
@testable import MFAImport
@testable import MFAPamStacks
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem
@testable import MFAWire

/// totp-enroll ↔ pam-totpd (AdminProtocol, DaemonStore, DaemonService.handleAdmin), without a
/// socket: the codec, who may ask, and the whole store contract through the codec.
final class AdminProtocolTests: XCTestCase {
    let user = Array("alice".utf8)
    let secret = Array("12345678901234567890".utf8)

    func factor(_ label: String = "phone", secret: [UInt8]? = nil) throws -> Factor {
        try Factor(label: Array(label.utf8), parameters: try OTPParameters(algorithm: .sha256, digits: 8, period: 60),
                   created: 1_700_000_000, enrolledStep: 28_333_333, secret: secret ?? self.secret)
    }

    func testEveryRequestRoundTrips() throws {
        var rng = SplitMix64(seed: 3)
        let (codes, set) = RecoverySet.generate(count: 32, iterations: 1_000, using: &rng)
        let requests: [AdminRequest] = [
            .status(user: user), .users(after: []), .users(after: Array("bob".utf8)),
            .checkEnrollable(user: user, uid: 1000, label: Array("phone".utf8), secret: nil),
            .checkEnrollable(user: user, uid: 1000, label: Array("phone".utf8), secret: secret),
            .enroll(user: user, uid: 1000, factor: try factor(), importedCodes: nil),
            .enroll(user: user, uid: 4_000_000_000, factor: try factor(secret: [UInt8](repeating: 7, count: 128)), importedCodes: codes),
            .enroll(user: user, uid: 1000, factor: try factor(), importedCodes: []),
            .removeFactor(user: user, uid: 1000, label: Array("phone".utf8), mayRemoveLast: true),
            .removeFactor(user: user, uid: 1000, label: Array("phone".utf8), mayRemoveLast: false),
            .replaceRecovery(user: user, uid: 1000, set: set), .unlock(user: user), .purge(user: user),
            .auditTrail(user: nil, since: 0, after: 0), .auditTrail(user: user, since: 1_700_000_000, after: 42),
            .auditTrail(user: [], since: -1, after: UInt64.max),
        ]
        for r in requests {
            let frame = try XCTUnwrap(r.encoded(), "\(r)")
            XCTAssertEqual(DaemonProtocol.adminFrameLength(header: frame.prefix(6), reply: false), frame.count)
            XCTAssertNil(DaemonProtocol.frameLength(header: frame.prefix(6), reply: false), "not a module request")
            XCTAssertThrowsError(try DaemonRequest.decode(frame), "the module's decoder refuses it")
            XCTAssertEqual(try AdminRequest.decode(frame), r)
        }
        // Fields that do not fit are refused, never cut.
        XCTAssertNil(AdminRequest.status(user: [UInt8](repeating: 0x61, count: 256)).encoded())
        XCTAssertNil(AdminRequest.enroll(user: user, uid: 1, factor: try factor(), importedCodes: [[UInt8]](repeating: [0x31], count: 256)).encoded())
    }

    /// A status leaves the daemon without any secret or recovery hash: the frame does not hold
    /// the bytes, and what decodes has none (no stand-in either).
    func testAStatusCarriesNoSecret() throws {
        var rng = SplitMix64(seed: 5)
        let (_, set) = RecoverySet.generate(count: 10, iterations: 1_000, using: &rng)
        let record = UserRecord(uid: 1000, id: 9, factors: [try factor(secret: secret), try factor("key", secret: [UInt8](repeating: 0xA5, count: 64))], recovery: set)
        var state = UserState()
        state.sequence = 12
        state.failures = 3
        state.lockedUntil = 1_700_000_600
        state.recoverySet = set.id
        state.recoveryUsed = 0b101
        state.successProcess = 4321
        state.setLastStep(28_333_340, forLabel: Array("phone".utf8), drift: -2)
        state.sends = [1_700_000_100, 1_700_000_500]  // codes sent: status shows them (fleet mode: through pam-totpd)
        let status = UserStatus(record: record, state: state)
        let frame = AdminReply.status(status.withoutSecrets()).encoded()
        let raw = AdminReply.status(status).encoded()
        XCTAssertEqual(frame, raw, "the encoder itself never writes a secret")
        for needle in [secret, [UInt8](repeating: 0xA5, count: 16), set.salt, set.hashes[0]] {
            XCTAssertFalse(contains(frame, needle), "the frame holds secret material")
        }
        guard case .status(let back?) = try AdminReply.decode(frame) else { return XCTFail("status") }
        XCTAssertEqual(back.state, state)
        XCTAssertEqual(back.record.uid, 1000)
        XCTAssertEqual(back.record.factors.map(\.label), record.factors.map(\.label))
        XCTAssertEqual(back.record.factors.map(\.otpKey?.parameters), record.factors.map(\.otpKey?.parameters))
        XCTAssertEqual(back.record.factors.map(\.data.enrolledStep), record.factors.map(\.data.enrolledStep))
        XCTAssertTrue(back.record.factors.allSatisfy { $0.otpKey?.secret.isEmpty ?? true })
        XCTAssertEqual(back.record.recovery?.id, set.id)
        XCTAssertEqual(back.record.recovery?.hashes.count, 10)
        XCTAssertEqual(back.record.recovery?.hashes.allSatisfy(\.isEmpty), true)
        // The largest status (32 factors with 64-byte labels, each used) fits one frame.
        var big = UserRecord(uid: 1)
        var bigState = UserState()
        for i in 0..<UserRecord.maxFactors {
            let label = Array(String(format: "%02d", i).utf8) + [UInt8](repeating: 0x78, count: 62)
            big.factors.append(try Factor(label: label, parameters: .default, created: 1, secret: secret))
            bigState.setLastStep(UInt64(i), forLabel: label)
        }
        bigState.sends = (0..<32).map { 1_700_000_000 + Int64($0) * 60 }
        guard case .status(let b?) = try AdminReply.decode(AdminReply.status(UserStatus(record: big, state: bigState)).encoded()) else {
            return XCTFail("the largest status")
        }
        XCTAssertEqual(b.record.factors.count, UserRecord.maxFactors)
        XCTAssertEqual(b.state.sends.count, 32)
    }

    func testEveryReplyKindRoundTrips() throws {
        let replies: [AdminReply] = [
            .done, .number(0), .number(-1), .number(Int64.max), .status(nil),
            .users([], more: false), .users([user, Array("bob".utf8)], more: true),
            .unlocked(UnlockResult(failures: 100, lockedUntil: 1_700_000_000, rebuilt: true)),
            .failed(.refusal(.labelTaken)), .failed(.refused(.sendLimited, "a code was sent 5 s ago: wait 55 s")),
            .failed(.daemon("database unavailable")), .failed(.invalidUserName), .refused("needs root"),
            .auditTrail([], more: false),
            .auditTrail([AuditEvent(id: 1, time: 1_700_000_000, role: Array("host_web1".utf8), account: user, uid: 1000,
                                    event: Array("failure".utf8), label: [], failures: 3, lockedUntil: 1_700_000_600,
                                    detail: Array("wrong code".utf8)),
                         AuditEvent(id: 9, time: -1, role: [], account: [], uid: nil, event: Array("purge".utf8),
                                    label: Array("phone".utf8), failures: nil, lockedUntil: 0, detail: [])], more: true),
        ]
        for r in replies {
            let frame = r.encoded()
            XCTAssertEqual(DaemonProtocol.adminFrameLength(header: frame.prefix(6), reply: true), frame.count)
            XCTAssertEqual(try AdminReply.decode(frame), r)
        }
    }

    /// Every refusal crosses the wire by its number, with its text; a number no refusal has
    /// does not decode (an error, never another refusal); every SQLSTATE is its own.
    func testEveryRefusalCrossesTheWireByItsNumber() throws {
        XCTAssertEqual(Set(Refusal.allCases.map(\.sqlState)).count, Refusal.allCases.count)
        for r in Refusal.allCases {
            XCTAssertEqual(try AdminReply.decode(AdminReply.failed(.refusal(r)).encoded()), .failed(.refused(r, r.text)))
            XCTAssertEqual(Refusal(sqlState: r.sqlState), r)
            XCTAssertTrue(r.sqlState.hasPrefix("PT"), r.sqlState)
        }
        for state in ["P0001", "23505", "PT000", "PT999", "PT02", "pt002", "PT0021", "PTabc"] { XCTAssertNil(Refusal(sqlState: state), state) }
        var frame = AdminReply.failed(.refusal(.labelTaken)).encoded()
        // The refusal's number is the error's u32 after its kind byte: one no refusal has.
        let kindAt = try XCTUnwrap(frame.indices.first { frame[$0] == 12 && frame[$0 + 4] == 2 })
        frame[kindAt + 4] = 200
        XCTAssertThrowsError(try AdminReply.decode(frame))
    }

    /// Every refusal sql/api.sql raises has its own SQLSTATE of class PT, each a Refusal.
    func testEverySQLRefusalHasItsOwnSQLState() throws {
        let api = try String(contentsOf: packageRoot.appendingPathComponent("sql/api.sql"), encoding: .utf8)
        XCTAssertFalse(api.contains("P0001"), "a refusal raised as plain raise_exception")
        let raises = api.components(separatedBy: "RAISE EXCEPTION").dropFirst()
        XCTAssertGreaterThanOrEqual(raises.count, 23)
        var states: [String] = []
        for r in raises {
            // To its end: a ';' that ends a line or comes before END IF (a message may hold one).
            let statement = r.range(of: #";(\s*\n| END IF)"#, options: .regularExpression).map { String(r[..<$0.lowerBound]) } ?? String(r)
            // A login or enrolment past its deadline is no refusal: it ends as a cancelled
            // statement does (query_canceled): the login fails and nothing was recorded.
            if statement.contains("USING ERRCODE = '57014'") { continue }
            let codes = statement.matches(of: /'(PT\d{3})'/).map { String($0.1) }
            XCTAssertFalse(codes.isEmpty, "a RAISE without its own SQLSTATE: \(statement)")
            for c in codes { XCTAssertNotNil(Refusal(sqlState: c), c) }
            states += codes
        }
        XCTAssertEqual(Set(states).count, states.count, "one SQLSTATE per refusal: \(states.sorted())")
    }

    /// Every truncation, an extra byte, and any flag byte other than 0 or 1: an error, never a trap.
    func testMalformedFramesAreRejected() throws {
        let request = try XCTUnwrap(AdminRequest.enroll(user: user, uid: 1, factor: try factor(), importedCodes: [Array("123".utf8)]).encoded())
        let reply = AdminReply.unlocked(UnlockResult(failures: 1, lockedUntil: 2, rebuilt: false)).encoded()
        for n in 0..<request.count { XCTAssertThrowsError(try AdminRequest.decode(Array(request.prefix(n))), "cut at \(n)") }
        for n in 0..<reply.count { XCTAssertThrowsError(try AdminReply.decode(Array(reply.prefix(n))), "cut at \(n)") }
        var longer = request + [0]
        longer[5] &+= 1
        XCTAssertThrowsError(try AdminRequest.decode(longer), "a byte left over")
        var badFlag = reply
        badFlag[badFlag.count - 1] = 2
        XCTAssertThrowsError(try AdminReply.decode(badFlag), "a flag that is not 0 or 1")
        var unknownOp = request
        unknownOp[6] = 99
        XCTAssertThrowsError(try AdminRequest.decode(unknownOp))
        XCTAssertThrowsError(try AdminReply.decode(request), "a request is not a reply")
        // A factor out of range inside an otherwise well-formed frame.
        var badDigits = request
        let digitsAt = 6 + 1 + 1 + user.count + 4 + 1 + 1 + 5 + 8 + 1 + 1  // ... uid, kind, label "phone", created, no serial, algorithm
        XCTAssertEqual(badDigits[digitsAt], 8)
        badDigits[digitsAt] = 9
        XCTAssertThrowsError(try AdminRequest.decode(badDigits))
    }

    /// A factor carries its kind on the wire (FactorKind): a kind this build does not know is
    /// malformed, never read as TOTP.
    func testUnknownFactorKindIsMalformed() throws {
        let request = try XCTUnwrap(AdminRequest.enroll(user: user, uid: 1, factor: try factor(), importedCodes: nil).encoded())
        let kindAt = 6 + 1 + 1 + user.count + 4
        XCTAssertEqual(request[kindAt], FactorKind.totp.rawValue)
        guard case .enroll(_, _, let decoded, _) = try AdminRequest.decode(request) else { return XCTFail("not an enroll") }
        XCTAssertEqual(decoded.kind, .totp)
        for kind: UInt8 in [0, 3, 255] {
            var unknown = request
            unknown[kindAt] = kind
            XCTAssertThrowsError(try AdminRequest.decode(unknown), "kind \(kind)")
        }
    }

    /// Only root manages enrolments through the daemon: anyone else is refused and nothing
    /// changes, even for their own account (they would skip totp-enroll's re-authentication).
    func testACallerWithoutRootIsRefusedAndNothingChanges() throws {
        let (dir, path) = try makeTemporaryStoreDirectory()
        defer { removeTemporaryDirectory(dir) }
        let store = try Store(path: Array(path.utf8))
        var rng = SplitMix64(seed: 1)
        try store.enroll(user: user, accountUID: 1000, factor: try factor(), using: &rng)
        var site = ModuleOptions()
        site.store = Array(path.utf8)
        let service = DaemonService<Store>(site: site) { (p: [UInt8]) throws(MFAError) -> Store in try Store(path: p) }
        let own = PeerCredentials(uid: 1000, pid: 77)
        for request in [AdminRequest.purge(user: user), .removeFactor(user: user, uid: 1000, label: Array("phone".utf8), mayRemoveLast: true),
                        .enroll(user: user, uid: 1000, factor: try factor("extra", secret: Array("abcdefghijabcdefghij".utf8)), importedCodes: nil),
                        .unlock(user: user), .status(user: user), .users(after: [])] {
            let (reply, log) = service.handleAdmin(request, peer: own, at: 1_700_000_000, using: &rng)
            guard case .refused = reply else { return XCTFail("\(request): \(reply)") }
            XCTAssertTrue(log.string.contains("refused"), log.string)
        }
        XCTAssertEqual(try store.status(user: user)?.record.factors.map(\.label), [Array("phone".utf8)])
        // Root is answered.
        guard case .status(let s?) = service.handleAdmin(.status(user: user), peer: PeerCredentials(uid: 0, pid: 1), at: 0, using: &rng).reply else {
            return XCTFail("root's status")
        }
        XCTAssertEqual(s.record.factors.first?.otpKey?.secret, [], "no secret, and no stand-in for one")
        // A name that cannot be a record name is an error, not a path.
        guard case .failed(.invalidUserName) = service.handleAdmin(.purge(user: Array("../x".utf8)), peer: PeerCredentials(uid: 0, pid: 1),
                                                                    at: 0, using: &rng).reply else { return XCTFail("../x") }
    }

    /// The store interface's whole contract through DaemonStore: every operation encoded,
    /// answered by DaemonService on a file store, decoded — what totp-enroll relies on in fleet
    /// mode behaves as the store itself does.
    func testTheStoreContractHoldsThroughTheDaemon() throws {
        let (dir, path) = try makeTemporaryStoreDirectory()
        defer { removeTemporaryDirectory(dir) }
        var site = ModuleOptions()
        site.store = Array(path.utf8)
        let service = DaemonService<Store>(site: site) { (p: [UInt8]) throws(MFAError) -> Store in try Store(path: p) }
        let root = PeerCredentials(uid: 0, pid: 4242)
        var exchanged = 0
        let exchange: DaemonStore.Exchange = { (frame, now, sent) throws(MFAError) -> [UInt8] in
            exchanged += 1
            sent = true
            if DaemonProtocol.adminFrameLength(header: frame.prefix(6), reply: false) != nil {
                var rng = SystemRandomNumberGenerator()
                return service.handleAdmin(try AdminRequest.decode(frame), peer: root, at: now, using: &rng).reply.encoded()
            }
            let request = try DaemonRequest.decode(frame)
            // The account the contract's lookups give: NSS in the daemon.
            return service.handle(request, peer: root, at: now) { (name) throws(MFAError) -> Account? in
                Account(name: name, uid: 4242)
            }.reply.encoded()
        }
        try StoreContract<DaemonStore> { DaemonStore(storePath: Array(path.utf8), exchange: exchange) }.run()
        XCTAssertGreaterThan(exchanged, 50)
    }

    /// `users` comes in pages; the client reads them all, in order, whatever their size.
    func testUsersArePaged() throws {
        let (dir, path) = try makeTemporaryStoreDirectory()
        defer { removeTemporaryDirectory(dir) }
        let files = try Store(path: Array(path.utf8))
        var rng = SplitMix64(seed: 9)
        var names: [String] = []
        for i in 0..<60 {
            let name = "user" + String(format: "%03d", i) + String(repeating: "x", count: 120)
            names.append(name)
            try files.enroll(user: Array(name.utf8), accountUID: UInt32(2000 + i),
                             factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 1,
                                                secret: Array("abcdefghij".utf8) + [UInt8(i), 1, 2, 3, 4, 5, 6, 7, 8, 9]), using: &rng)
        }
        var site = ModuleOptions()
        site.store = Array(path.utf8)
        let service = DaemonService<Store>(site: site) { (p: [UInt8]) throws(MFAError) -> Store in try Store(path: p) }
        var pages = 0
        let store = DaemonStore(storePath: site.store) { (frame, now, _) throws(MFAError) -> [UInt8] in
            pages += 1
            var rng = SystemRandomNumberGenerator()
            return service.handleAdmin(try AdminRequest.decode(frame), peer: PeerCredentials(uid: 0, pid: 1), at: now, using: &rng).reply.encoded()
        }
        XCTAssertEqual(try store.users().map { String(decoding: $0, as: UTF8.self) }, names)
        XCTAssertGreaterThanOrEqual(pages, 60 * 128 / AdminReply.usersPageBytes)
        // A daemon whose pages do not move forward is an error, not a loop.
        let stuck = DaemonStore(storePath: site.store) { (_, _, _) throws(MFAError) -> [UInt8] in
            AdminReply.users([Array("a".utf8)], more: true).encoded()
        }
        XCTAssertThrowsError(try stuck.users())
    }

    /// The audit trail comes in pages too; a daemon whose pages do not move forward is an error,
    /// and `limit` bounds what is read. A file store keeps no trail and says where to look.
    func testAuditTrailIsPagedAndAFileStoreSaysItKeepsNone() throws {
        func event(_ id: UInt64) -> AuditEvent {
            AuditEvent(id: id, time: Int64(id), role: Array("host".utf8), account: user, uid: 1000, event: Array("success".utf8),
                       label: Array("phone".utf8), failures: 0, lockedUntil: 0, detail: [UInt8](repeating: 0x61, count: 200))
        }
        var asked: [UInt64] = []
        let store = DaemonStore(storePath: []) { (frame, _, _) throws(MFAError) -> [UInt8] in
            guard case .auditTrail(_, _, let after) = try AdminRequest.decode(frame) else { throw .malformed("test") }
            asked.append(after)
            // What DaemonService sends: as many of the 100 events after `after` as fit.
            let all = after < 100 ? Array(after + 1...100) : []
            var page: [AuditEvent] = []
            var bytes = 0
            for id in all {
                let e = event(id)
                guard bytes + e.encodedSize <= AdminReply.usersPageBytes else { break }
                page.append(e); bytes += e.encodedSize
            }
            return AdminReply.auditTrail(page, more: (page.last?.id ?? 100) < 100).encoded()
        }
        XCTAssertEqual(try store.auditTrail(user: nil, since: 0, after: 0, limit: 1000).map(\.id), Array(1...100))
        XCTAssertGreaterThan(asked.count, 5, "pages of about 3 KB")
        XCTAssertEqual(try store.auditTrail(user: nil, since: 0, after: 0, limit: 20).map(\.id), Array(1...20))
        XCTAssertEqual(try store.auditTrail(user: nil, since: 0, after: 90, limit: 1000).map(\.id), Array(91...100))
        let stuck = DaemonStore(storePath: []) { (_, _, _) throws(MFAError) -> [UInt8] in
            AdminReply.auditTrail([event(1)], more: true).encoded()
        }
        XCTAssertThrowsError(try stuck.auditTrail(user: nil, since: 0, after: 5, limit: 1000))

        let dir = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(dir) }
        var site = ModuleOptions()
        site.store = Array(dir.path.utf8)
        let service = DaemonService<Store>(site: site) { (p: [UInt8]) throws(MFAError) -> Store in try Store(path: p) }
        var rng = SystemRandomNumberGenerator()
        let reply = service.handleAdmin(.auditTrail(user: nil, since: 0, after: 0), peer: PeerCredentials(uid: 0, pid: 1), at: 0, using: &rng).reply
        guard case .failed(.refused(.auditNotKept, let why)) = reply else { return XCTFail("\(reply)") }
        XCTAssertTrue(why.string.contains("fleet mode"), why.string)
        let refused = service.handleAdmin(.auditTrail(user: nil, since: 0, after: 0), peer: PeerCredentials(uid: 1000, pid: 1), at: 0, using: &rng).reply
        guard case .refused = refused else { return XCTFail("only root: \(refused)") }
    }

    /// A change whose reply is lost after the daemon had the whole request may have been made:
    /// it is reported as such, never as a plain failure (which means nothing changed). A read,
    /// or a request that never got out, is an ordinary error.
    func testALostReplyToAChangeSaysItMayHaveBeenMade() throws {
        func store(sent: Bool, reply: [UInt8]?) -> DaemonStore {
            DaemonStore(storePath: Array("/x".utf8)) { (_, _, wasSent) throws(MFAError) -> [UInt8] in
                wasSent = sent
                guard let reply else { throw .daemon("no reply within 5 s (reading the reply)") }
                return reply
            }
        }
        func message(_ body: () throws -> Void) -> String {
            do { try body(); return "no error" } catch {
                guard let e = error as? MFAError else { return "\(error)" }
                return DaemonStore.isUnconfirmed(e) ? "may have been made" : "\(e)"
            }
        }
        var rng = SplitMix64(seed: 2)
        let change: [(String, (DaemonStore) throws -> Void)] = [
            ("enroll", { _ = try $0.enroll(user: self.user, accountUID: 1, factor: try self.factor(), importedCodes: nil, using: &rng) }),
            ("remove", { _ = try $0.removeFactor(user: self.user, accountUID: 1, label: Array("p".utf8), mayRemoveLast: false) }),
            ("unlock", { _ = try $0.unlock(user: self.user, at: 0) }),
            ("purge", { _ = try $0.purge(user: self.user) }),
        ]
        for (name, op) in change {
            XCTAssertTrue(message { try op(store(sent: true, reply: nil)) }.contains("may have been made"), name)
            XCTAssertTrue(message { try op(store(sent: true, reply: DaemonProtocol.adminReplyMagic + [0, 1])) }.contains("may have been made"),
                          "\(name): a cut reply")
            let unsent = message { try op(store(sent: false, reply: nil)) }
            XCTAssertFalse(unsent.contains("may have been made"), "\(name): never sent: \(unsent)")
        }
        let read = message { _ = try store(sent: true, reply: nil).status(user: self.user) }
        XCTAssertFalse(read.contains("may have been made"), read)
        // The daemon saying its database failed is no proof that nothing changed; the
        // database refusing the change (a message for the user) is.
        let unavailable = AdminReply.failed(.daemon("database unavailable: server closed the connection")).encoded()
        XCTAssertTrue(message { _ = try store(sent: true, reply: unavailable).purge(user: self.user) }.contains("may have been made"))
        let refused = AdminReply.failed(.refusal(.labelTaken)).encoded()
        XCTAssertFalse(message { _ = try store(sent: true, reply: refused).purge(user: self.user) }.contains("may have been made"))
    }

    func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, needle.count <= haystack.count else { return false }
        for i in 0...(haystack.count - needle.count) where Array(haystack[i..<(i + needle.count)]) == needle { return true }
        return false
    }
}
