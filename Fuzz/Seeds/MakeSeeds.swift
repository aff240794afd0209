// Writes the generated part of the seed corpus (Fuzz/corpus/*/gen-*) with the
// store's own serializers, so the seeds are files the code really writes (the v1-* files next
// to them were written by format version 1, which is still read):
//   swiftc -parse-as-library -module-name Seeds -I Sources/CLibc $(FUZZ_SOURCES) \
//     Fuzz/Seeds/MakeSeeds.swift -o .build-fuzz/make-seeds && .build-fuzz/make-seeds Fuzz/corpus
// (`make fuzz-seeds` does exactly that). Deterministic: the same code writes the same bytes.
import Glibc

/// SplitMix64: fixed seeds, reproducible files.
struct Mix: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func save(_ bytes: [UInt8], _ dir: String, _ name: String) {
    let path = dir + "/" + name
    guard let f = fopen(path, "wb") else { fatalError("cannot write \(path)") }
    _ = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, f) }
    fclose(f)
    print("\(path): \(bytes.count) bytes")
}

func factor(_ label: String, _ algorithm: HashAlgorithm, _ digits: Int, _ period: UInt64, _ created: Int64,
            _ rng: inout Mix) throws(MFAError) -> Factor {
    try Factor(label: Array(label.utf8), parameters: try OTPParameters(algorithm: algorithm, digits: digits, period: period),
               created: created, enrolledStep: UInt64(created) / period,
               secret: Secret.generate(for: algorithm, using: &rng))
}

@main
struct MakeSeeds {
    /// What several seed files share.
    struct Shared {
        var one: UserRecord
        var codes: RecoverySet
        var three: UserRecord
        var token: Factor
        var mobile: Factor
        var mail: Factor
    }

    static func main() throws {
        guard CommandLine.arguments.count == 2 else { fatalError("usage: make-seeds CORPUS_DIR") }
        let corpus = CommandLine.arguments[1]
        var rng = Mix(state: 7)
        // In this order: each takes its numbers from rng, and the files must stay the same bytes.
        let shared = try records(corpus, &rng)
        states(corpus, shared, &rng)
        uris(corpus, shared)
        protocolSeeds(corpus)
        adminSeeds(corpus, shared, &rng)
        destinationSeeds(corpus)
        hostCredentialSeeds(corpus)
    }

    static func records(_ corpus: String, _ rng: inout Mix) throws -> Shared {
        // Records: one default factor; three factors with every algorithm, a label that needs
        // percent-encoding and recovery codes; recovery codes alone.
        let one = UserRecord(uid: 1000, id: rng.next(), factors: [try factor("phone", .sha1, 6, 30, 1_700_000_000, &rng)])
        let codes = RecoverySet.generate(count: 3, iterations: 1_000, using: &rng).set
        let three = UserRecord(uid: 0, id: rng.next(), factors: [
            try factor("phone", .sha1, 6, 30, 1_700_000_000, &rng),
            try factor("yubikey 5 (backup)", .sha256, 8, 60, 1_700_000_100, &rng),
            try factor("laptop%:é", .sha512, 7, 3600, 0, &rng),
        ], recovery: codes)
        let recoveryOnly = UserRecord(recovery: RecoverySet.generate(count: 1, iterations: 100_000, using: &rng).set)
        save(one.serialized(), corpus + "/record", "gen-one-factor")
        save(three.serialized(), corpus + "/record", "gen-three-factors-recovery")
        save(recoveryOnly.serialized(), corpus + "/record", "gen-recovery-only")
        // A hardware token (HOTP) beside a TOTP factor.
        var token = try Factor(kind: .hotp, label: Array("fob 1".utf8), parameters: try OTPParameters(algorithm: .sha256, digits: 8, period: 30),
                               created: 1_700_000_200, counter: 42, secret: Secret.generate(for: .sha1, using: &rng))
        let withToken = UserRecord(uid: 1000, id: rng.next(), factors: [one.factors[0], token])
        save(withToken.serialized(), corpus + "/record", "gen-hotp-factor")
        // The token with its serial number (import-pskc): a `serial` line after its factor line.
        token.serial = Array("UBHE 0001%2345".utf8)
        save(UserRecord(uid: 1000, id: 0x5E71A1, factors: [token, one.factors[0]]).serialized(), corpus + "/record", "gen-hotp-serial")
        // A phone and an address (sent codes) beside an app factor.
        let mobile = try Factor(outOfBand: .sms, label: Array("mobile".utf8), destination: Array("+15105551234".utf8), created: 1_700_000_300)
        let mail = try Factor(outOfBand: .email, label: Array("work mail".utf8), destination: Array("alice.b+pam@example.com".utf8),
                              created: 1_700_000_400)
        save(UserRecord(uid: 1000, id: 0x0B0B, factors: [one.factors[0], mobile, mail]).serialized(), corpus + "/record", "gen-sms-email")

        return Shared(one: one, codes: codes, three: three, token: token, mobile: mobile, mail: mail)
    }

    static func states(_ corpus: String, _ shared: Shared, _ rng: inout Mix) {
        let (three, codes, mobile) = (shared.three, shared.codes, shared.mobile)
        // State files as writeStateLocked leaves them: the first write (one slot, the other
        // zero), and two slots after several writes (failures, lockout, used recovery codes).
        func file(_ states: [UserState]) -> [UInt8] {
            var out = [UInt8](repeating: 0, count: UserState.fileSize)
            for s in states {
                let slot = s.slotBytes()
                let at = Int(s.sequence % 2) * UserState.slotSize
                out.replaceSubrange(at..<(at + UserState.slotSize), with: slot)
            }
            return out
        }
        var s = UserState()
        s.sequence = 1
        s.recordID = three.id
        s.setLastStep(56_666_666, forLabel: Array("phone".utf8))
        save(file([s]), corpus + "/state", "gen-first-write")
        var t = s
        t.sequence = 2
        t.failures = 3
        t.successProcess = 4242
        t.lockedUntil = 1_700_000_300
        t.markRecoveryUsed(set: codes.id, index: 1)
        t.setLastStep(28_333_333, forLabel: Array("yubikey 5 (backup)".utf8))
        save(file([s, t]), corpus + "/state", "gen-two-slots")
        var full = t
        full.sequence = 41
        for i in 0..<UserState.maxEntries { full.setLastStep(UInt64(i) * 1_000_003, forLabel: Array("factor \(i)".utf8)) }
        save(file([t, full]), corpus + "/state", "gen-all-entries")
        // A code sent and waiting, and the account's recent sends (the out-of-band part).
        var sent = t
        sent.sequence = 3
        sent.pending = PendingCode.make(for: mobile, digits: 6, lifetime: 300, maxAttempts: 3, at: 1_700_000_500, using: &rng).pending
        for i in 0..<5 { sent.recordSend(at: 1_700_000_000 + Int64(i) * 100) }
        save(file([t, sent]), corpus + "/state", "gen-code-sent")

    }

    static func uris(_ corpus: String, _ shared: Shared) {
        let (one, three, token) = (shared.one, shared.three, shared.token)
        // URIs as totp-enroll writes them.
        let uris = [
            OTPAuthURI(issuer: [], account: Array("alice".utf8), secret: (one.factors[0].otpKey?.secret ?? []), parameters: .default),
            OTPAuthURI(issuer: Array("pam_totp host.example".utf8), account: Array("alice@host".utf8),
                       secret: (three.factors[1].otpKey?.secret ?? []), parameters: (three.factors[1].otpKey?.parameters ?? .default)),
            OTPAuthURI(issuer: Array("Ex&mple=1".utf8), account: Array("bob".utf8), secret: (three.factors[2].otpKey?.secret ?? []),
                       parameters: (three.factors[2].otpKey?.parameters ?? .default)),
            OTPAuthURI(issuer: Array("Example".utf8), account: Array("alice (fob)".utf8), secret: (token.otpKey?.secret ?? []),
                       parameters: (token.otpKey?.parameters ?? .default), counter: 42),
        ]
        for (i, u) in uris.enumerated() { save(u.bytes, corpus + "/uri", "gen-\(i + 1)") }

    }

    static func protocolSeeds(_ corpus: String) {
        // pam-totpd's socket: requests as the module sends them, and every kind of reply.
        var o = ModuleOptions()
        o.forwardPass = true
        o.nullok = true
        o.hotpWindow = 25
        let requests = [
            DaemonRequest(operation: .lookup, service: Array("i3lock".utf8), user: Array("alice".utf8), options: ModuleOptions(), answer: []),
            DaemonRequest(operation: .authenticate, service: Array("sshd".utf8), user: Array("alice".utf8), options: o, answer: Array("12345678".utf8)),
            DaemonRequest(operation: .send, service: Array("sshd".utf8), user: Array("alice".utf8), options: ModuleOptions(), answer: Array("phone".utf8)),
            // Enrolment at first login: the checks (no secret), then the factor with the code typed.
            DaemonRequest(operation: .mayEnrolAtLogin, service: Array("sshd".utf8), user: Array("alice".utf8), options: ModuleOptions(),
                          answer: [], newLabel: Array("alice@host1".utf8)),
            DaemonRequest(operation: .enrolAtLogin, service: Array("login".utf8), user: Array("alice".utf8), options: ModuleOptions(),
                          answer: Array("123456".utf8), newLabel: Array("alice@host1".utf8), newSecret: Array("12345678901234567890".utf8)),
        ]
        for (i, r) in requests.enumerated() { if let f = r.encoded() { save(f, corpus + "/protocol", "gen-request-\(i + 1)") } }
        let replies: [DaemonReply] = [
            .outcome(.success(factor: Array("phone".utf8), step: 56_666_667, digits: 6)), .outcome(.recoveryCode(remaining: 3)),
            .outcome(.wrongCode(replayed: true, failures: 2, lockedUntil: 1_700_000_000)),
            .outcome(.notRecorded(.system(operation: "pwrite", errno: Errno(28)))), .outcome(.lockedOut(until: 1, permanent: true)),
            .outcome(.unenrolled), .outcome(.failed(.insecureStore("owner"))), .enrolled(FactorHints()), .refused("not yours"),
            .enrolled(FactorHints(typed: true, sent: [FactorHint(kind: .sms, label: Array("phone".utf8), masked: Array("+1******1234".utf8)),
                                                   FactorHint(kind: .email, label: Array("mail".utf8), masked: Array("a***@example.com".utf8))])),
            .sent(fresh: true, sentAt: 1_700_000_000, expiresAt: 1_700_000_300, masked: Array("+1******1234".utf8)),
            .notSent("a code was sent 3 s ago: wait 27 s before asking for another"),
            .firstFactor(.mayEnrol), .firstFactor(.enrolled), .firstFactor(.hadFactor),
        ]
        for (i, r) in replies.enumerated() { save(r.encoded(), corpus + "/protocol", "gen-reply-\(i + 1)") }

    }

    static func adminSeeds(_ corpus: String, _ shared: Shared, _ rng: inout Mix) {
        let (three, token, mobile, mail) = (shared.three, shared.token, shared.mobile, shared.mail)
        // totp-enroll to pam-totpd (fleet mode): every request and reply kind.
        let user = Array("alice".utf8)
        let (adminCodes, adminSet) = RecoverySet.generate(count: 3, iterations: 1_000, using: &rng)
        let adminRequests: [AdminRequest] = [
            .status(user: user), .users(after: []), .users(after: Array("bob".utf8)),
            .checkEnrollable(user: user, uid: 1000, label: Array("phone".utf8), secret: nil),
            .checkEnrollable(user: user, uid: 1000, label: Array("key".utf8), secret: (three.factors[0].otpKey?.secret ?? [])),
            .enroll(user: user, uid: 1000, factor: three.factors[0], importedCodes: nil),
            .enroll(user: user, uid: 1000, factor: three.factors[1], importedCodes: adminCodes),
            .enroll(user: user, uid: 1000, factor: token, importedCodes: nil),
            .removeFactor(user: user, uid: 1000, label: Array("phone".utf8), mayRemoveLast: true),
            .replaceRecovery(user: user, uid: 1000, set: adminSet), .unlock(user: user), .purge(user: user),
            .auditTrail(user: nil, since: 0, after: 0), .auditTrail(user: user, since: 1_700_000_000, after: 41),
            .sendEnrolmentCode(user: user, uid: 1000, factor: mobile), .sendEnrolmentCode(user: user, uid: 1000, factor: mail),
            .confirmEnrolment(user: user, uid: 1000, factor: mobile, sentAt: 1_700_000_000, answer: Array("123456".utf8)),
        ]
        for (i, r) in adminRequests.enumerated() { if let f = r.encoded() { save(f, corpus + "/admin", "gen-request-\(i + 1)") } }
        var state = UserState()
        state.failures = 2
        state.setLastStep(56_666_667, forLabel: three.factors[0].label)
        let adminReplies: [AdminReply] = [
            .done, .number(3), .status(nil), .status(UserStatus(record: three, state: state)),
            .users([user, Array("bob".utf8)], more: true), .unlocked(UnlockResult(failures: 100, lockedUntil: 0, rebuilt: false)),
            .failed(.invalidParameters("a factor with this name already exists")), .refused("needs root"),
            .auditTrail([AuditEvent(id: 42, time: 1_700_000_000, role: Array("host_web1".utf8), account: user, uid: 1000,
                                    event: Array("failure".utf8), label: [], failures: 3, lockedUntil: 1_700_000_600,
                                    detail: Array("wrong code".utf8)),
                         AuditEvent(id: 43, time: 1_700_000_010, role: Array("admin_alice".utf8), account: user, uid: nil,
                                    event: Array("unlock".utf8), label: Array("phone".utf8), failures: nil, lockedUntil: 0,
                                    detail: [])], more: true),
            // A fleet host's status: the phone as the database masks it.
            .status(UserStatus(record: UserRecord(uid: 1000, factors: [{ var m = mobile; m.data = .sms(PhoneFactor(number: Array("+1******1234".utf8))); return m }()]),
                               state: UserState())),
        ]
        for (i, r) in adminReplies.enumerated() { save(r.encoded(), corpus + "/admin", "gen-reply-\(i + 1)") }

    }

    static func destinationSeeds(_ corpus: String) {
        // Out-of-band destinations and the message templates (one input feeds every check):
        // numbers and addresses as enrolment takes them, at their bounds, and what is refused
        // next to them; the default templates and ones with every escape.
        let destinations = [
            "+15105551234", "+12345678", "+123456789012345", "+1234567890123456", "+01234567", "+1 510 555 1234",
            "alice@example.com", "first.last+mfa@mail.example.org", "-oQ/tmp/x@example.com", "a@[192.0.2.1]",
            "\"a b\"@example.com", "a..b@example.com", "a@b@example.com", "alice@exa-mple.co", "alice@example.123",
            String(repeating: "l", count: 64) + "@" + String(repeating: "d", count: 63) + "." + String(repeating: "e", count: 63)
                + "." + String(repeating: "f", count: 61),
            "%c, %h, %m and %%", "%c %x", "100%", "Code f\u{FC}r %h: %c \u{2713}",
        ]
        for (i, d) in destinations.enumerated() { save(Array(d.utf8), corpus + "/destination", "gen-\(i + 1)") }
        for (name, t) in [("sms", MessageTemplate.defaultSMS), ("email-subject", .defaultEmailSubject), ("email-text", .defaultEmailText)] {
            save(t.text, corpus + "/destination", "gen-default-" + name)
            save(t.render(code: Array("123456".utf8), host: Array("web1.example.com".utf8), minutes: 5), corpus + "/destination", "gen-rendered-" + name)
        }
    }

    static func hostCredentialSeeds(_ corpus: String) {
        // host_credential files: as add-host writes them, at the name's bounds, and what is
        // refused next to them (a bad name, a short or upper-case key, no magic).
        let key = String(repeating: "0123456789abcdef", count: 4)
        let files = [
            "pam_totp-host v1 web1 " + key + "\n", "pam_totp-host v1 " + String(repeating: "h", count: 63) + " " + key,
            "pam_totp-host v1 a " + key, "pam_totp-host v1 -web1 " + key, "pam_totp-host v1 web1 " + key.uppercased(),
            "pam_totp-host v1 web1 " + String(key.dropLast(2)), "pam_totp-host v2 web1 " + key, "web1 " + key,
        ]
        for (i, f) in files.enumerated() { save(Array(f.utf8), corpus + "/hostcredential", "gen-\(i + 1)") }
    }
}
