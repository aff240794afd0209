import CLibCrypto
import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll import-pskc`: hardware tokens from a vendor's RFC 6030 (PSKC) file, each
/// assigned to a user by its serial number. Everything is checked before anything is saved:
/// the file's MACs, every assignment, every user, every key; then one commit per user and key.
struct ImportPSKC: Command {
    static let name = "import-pskc"
    static let abstract = "Import hardware tokens (HOTP/TOTP) from a PSKC file (RFC 6030), by serial number (root only)."
    static let discussion = """
            Each --assign SERIAL=USER (or each SERIAL,USER line of --assign-file) makes the key \
            with that serial number (or Key Id) a factor of USER, named after the serial unless \
            --name is given; the factor keeps the key's serial number (its Key Id if it has \
            none), which list and status show. Encrypted files (AES-CBC) need --key-file (the \
            pre-shared key in hex) or --passphrase-file (PBKDF2), and must carry a MAC, which is checked before \
            anything is decrypted. If anything is wrong (a MAC, a serial not in the file or \
            named twice, an unknown user, an unsupported key, a name already in use) nothing \
            is imported. Keys of the file that are not assigned are ignored. Secrets are never \
            printed or logged.
            """

    static let maxSideFileSize = 64 * 1024

    static let specs: [ArgumentSpec] = [
        .argument("FILE", "The PSKC file (XML)."),
        .repeated("--assign", "SERIAL=USER", "Give the key with this serial number to this user (repeatable)."),
        .option("--assign-file", "CSV", "Read the assignments from this file: SERIAL,USER lines; blank lines and # comments allowed."),
        .option("--passphrase-file", "FILE", "The passphrase of a PBKDF2-encrypted file (one trailing newline is ignored)."),
        .option("--key-file", "FILE", "The pre-shared key of an encrypted file, in hex (white space ignored)."),
        .option("--name", "LABEL", "Name the new factors this instead of by their serial numbers."),
        .option("--store", "DIR", "Use this store directory instead of the configured one."),
        ConfigFileOption.spec,
    ]

    let file: String
    let assign: [String]
    let assignFile: String?
    let passphraseFile: String?
    let keyFile: String?
    let name: String?
    let store: String?
    let configFile: ConfigFileOption

    init(_ arguments: Arguments) throws(CommandError) {
        file = try arguments.required("FILE")
        assign = arguments.strings("--assign")
        assignFile = arguments.string("--assign-file")
        passphraseFile = arguments.string("--passphrase-file")
        keyFile = arguments.string("--key-file")
        store = arguments.string("--store")
        configFile = ConfigFileOption(arguments)
        guard assign.isEmpty != (assignFile == nil) else {
            throw .usage("give the assignments with --assign SERIAL=USER or with --assign-file CSV (one of them)")
        }
        guard passphraseFile == nil || keyFile == nil else { throw .usage("give --passphrase-file or --key-file, not both") }
        name = try newFactorName(arguments)
    }

    struct Assignment {
        var serial: String
        var user: String
        /// Where it was given: `--assign` or `CSV line N`.
        var origin: String
    }

    func run() throws(CommandError) {
        try Self.requireRoot()
        let assignments = try readAssignments()
        let shownFile = shown(file)

        var bytes = try readBounded(file, limit: PSKCContainer.maxSize, what: "the PSKC file")
        defer { wipe(&bytes) }
        var container: PSKCContainer
        do { container = try PSKCContainer(parsing: bytes) } catch { throw CLIError(shownFile + ": " + CLIError.text(error) + "; nothing was imported") }
        defer { container.erase() }

        // Which key each assignment names; which user it goes to; what the factor is called.
        let (indices, contexts, labels, serials) = try resolve(assignments, in: container, file: shownFile)

        // A token is one user's.
        try Self.refuseAssigned(serials, users: contexts.map { $0.userName }, assignments: assignments, store: contexts.first)

        // The file's key, then every MAC, then the chosen keys decrypted and checked.
        var key = try encryptionKey(container, file: shownFile)
        defer { if key != nil { wipe(&key!) } }
        if key != nil { try LibCryptoAES.requireLibrary() }
        var tokens: [PSKCToken]
        do { tokens = try container.tokens(indices, encryptionKey: key, decryptor: LibCryptoAES()) } catch {
            let text = CLIError.text(error)
            throw CLIError(shownFile + ": " + text + (text.hasSuffix("nothing was imported") ? "" : "; nothing was imported"))
        }
        defer { for i in tokens.indices { tokens[i].erase() } }

        // Every user's store: the name free, room for a factor, the secret not already theirs.
        guard let first = contexts.first else { throw CLIError("no assignments; nothing was imported") }
        let enrolStore = try first.openStore()
        var factors = try makeFactors(tokens, contexts: contexts, labels: labels, serials: serials, assignments: assignments, store: enrolStore)
        defer { for f in factors { f.otpKey.map { wipeInPlace($0.secret) } } }

        // What no MAC covers, said before anything is saved (docs/HARDWARE-TOKENS.md).
        for line in Self.uncovered(container, indices: indices, tokens: tokens, assignments: assignments, file: shownFile) { warn(line) }

        try commit(factors, contexts: contexts, labels: labels, assignments: assignments, tokens: tokens, store: enrolStore)
        let ignored = container.keys.count - Set(indices).count
        if ignored > 0 { print("\(ignored) other key\(ignored == 1 ? "" : "s") in \(shownFile) had no assignment and \(ignored == 1 ? "was" : "were") ignored.") }
        if tokens.contains(where: { $0.kind == .totp }) {
            print("TOTP keys: time steps up to now count as used, so the code a token shows right now is refused; log in with its next one.")
        }
    }

    /// Which key each assignment names (no key twice), which user it goes to, what the factor is
    /// called (no name twice for one user) and the serial number it keeps.
    func resolve(_ assignments: [Assignment], in container: PSKCContainer, file shownFile: String) throws(CommandError)
        -> (indices: [Int], contexts: [CallerContext], labels: [String], serials: [[UInt8]]) {
        var indices: [Int] = []
        var contexts: [CallerContext] = []
        var labels: [String] = []
        var serials: [[UInt8]] = []                 // each key's serial number (its SerialNo, else its Key Id)
        var assignedKey: [Int: Int] = [:]           // key index -> its assignment
        var factorName: [String: Int] = [:]         // "user\0label" -> its assignment
        let lookup = KeyLookup(container)
        for a in assignments {
            let index = try Self.resolve(a.serial, in: container, file: shownFile, lookup: lookup)
            // A serial and a Key Id that name one key: one token is one user's.
            if let other = assignedKey[index] {
                throw CLIError("\(shown(assignments[other].serial)) and \(shown(a.serial)) name the same key of \(shownFile) (\(a.origin)); nothing was imported")
            }
            assignedKey[index] = indices.count
            let context: CallerContext
            do throws(CommandError) { context = try CallerContext(user: a.user, store: store, config: configFile.config) } catch {
                throw CLIError("\(error.description) (\(a.origin), serial \(shown(a.serial))); nothing was imported")
            }
            let label = name ?? a.serial
            do { try Factor.validateNew(label: Array(label.utf8)) } catch {
                throw CLIError("serial \(shown(a.serial)) cannot name a factor (\(CLIError.text(error))); give --name; nothing was imported")
            }
            if let other = factorName[context.userName + "\0" + label] {
                throw CLIError("serials \(shown(assignments[other].serial)) and \(shown(a.serial)) would both be factor \"\(shown(label))\" of \(context.userName)"
                               + (name != nil ? " (--name names every imported factor: assign one key per user, or leave --name out)" : "")
                               + "; nothing was imported")
            }
            // The factor keeps the token's serial number, whatever it is named and however it was assigned.
            let key = container.keys[index]
            let serial = key.serial.flatMap { $0.isEmpty ? nil : $0 } ?? key.id
            do { try Factor.validateNew(serial: serial) } catch {
                throw CLIError("serial \(shown(a.serial)): its serial number cannot be stored (\(CLIError.text(error))); nothing was imported")
            }
            factorName[context.userName + "\0" + label] = indices.count
            indices.append(index)
            contexts.append(context)
            labels.append(label)
            serials.append(serial)
        }
        return (indices, contexts, labels, serials)
    }

    /// The factors to save, checked against every user's store: the name free, room for a
    /// factor, the secret not already theirs nor another key's of this import for them.
    func makeFactors(_ tokens: [PSKCToken], contexts: [CallerContext], labels: [String], serials: [[UInt8]],
                     assignments: [Assignment], store enrolStore: EnrolStore) throws(CommandError) -> [Factor] {
        let now = Int64(time(nil))
        var factors: [Factor] = []
        var existing: [String: Int] = [:]  // each user's factors before the import
        var adding: [String: [Int]] = [:]  // each user's assignments in this import
        for (n, context) in contexts.enumerated() { adding[context.userName, default: []].append(n) }
        for (n, token) in tokens.enumerated() {
            let context = contexts[n]
            let mine = adding[context.userName] ?? []
            // Two keys of this import for one user: not the same secret, and room for all.
            if let other = mine.first(where: { $0 < n && constantTimeEqual(tokens[$0].secret, token.secret) }) {
                throw CLIError("serials \(shown(assignments[other].serial)) and \(shown(assignments[n].serial)) have the same secret and are both assigned to \(context.userName); nothing was imported")
            }
            if existing[context.userName] == nil {
                existing[context.userName] = try storeCall { () throws(MFAError) in try enrolStore.status(user: context.user) }?.record.factors.count ?? 0
            }
            if (existing[context.userName] ?? 0) + mine.count > UserRecord.maxFactors {
                throw CLIError("\(context.userName) would have more than \(UserRecord.maxFactors) factors; nothing was imported")
            }
            do throws(CommandError) { try checkEnrollable(enrolStore, context, label: labels[n], secret: token.secret) } catch {
                throw CLIError("serial \(shown(assignments[n].serial)) for \(context.userName): \(error.description); nothing was imported")
            }
            do throws(MFAError) {
                var factor: Factor
                switch token.kind {
                case .hotp:
                    factor = try Factor(kind: .hotp, label: Array(labels[n].utf8), parameters: token.parameters, created: now,
                                        counter: token.counter ?? 0, secret: token.secret)
                case .totp:
                    // As for an imported google-authenticator file: every step up to now counts as used.
                    let step = try TOTP.step(at: now, period: token.parameters.period)
                    factor = try Factor(label: Array(labels[n].utf8), parameters: token.parameters, created: now,
                                        enrolledStep: step, secret: token.secret)
                }
                factor.serial = serials[n]
                factors.append(factor)
            } catch {
                throw CLIError("serial \(shown(assignments[n].serial)): \(CLIError.text(error)); nothing was imported")
            }
        }
        return factors
    }

    /// One commit per user and key, each whole or not at all; if one fails, the ones before it
    /// are removed again, so that an import that reports failure has imported nothing.
    func commit(_ factors: [Factor], contexts: [CallerContext], labels: [String], assignments: [Assignment], tokens: [PSKCToken],
                store enrolStore: EnrolStore) throws(CommandError) {
        var done: [Int] = []
        for (n, factor) in factors.enumerated() {
            let context = contexts[n]
            do throws(CommandError) {
                _ = try storeCall { () throws(MFAError) in try enrolStore.enroll(user: context.user, accountUID: context.uid, factor: factor) }
            } catch let e {
                var kept: [String] = []
                for m in done.reversed() {
                    let c = contexts[m]
                    do {
                        _ = try storeCall { () throws(MFAError) in
                            try enrolStore.removeFactor(user: c.user, accountUID: c.uid, label: Array(labels[m].utf8), mayRemoveLast: true)
                        }
                        Audit.log("removed PSKC key \(Audit.safe(assignments[m].serial)) again: the import failed", context: c)
                    } catch {
                        kept.append("serial \(shown(assignments[m].serial)) for \(c.userName) (factor \"\(shown(labels[m]))\")")
                    }
                }
                throw CLIError("serial \(shown(assignments[n].serial)) for \(context.userName): \(e.description); "
                               + (kept.isEmpty ? "nothing was imported" + (done.isEmpty ? "" : " (the keys saved before it were removed again)")
                                               : "these could not be removed again and stay imported: " + kept.joined(separator: ", ")))
            }
            let kind = "\(factor.kind.name)".uppercased()
            Audit.log("imported PSKC key \(Audit.safe(assignments[n].serial)) from \(Audit.safe(file)) as \(kind) factor \"\(Audit.safe(labels[n]))\"",
                      context: context)
            done.append(n)
            print("Imported serial \(shown(assignments[n].serial)) for \(context.userName) as factor \"\(shown(labels[n]))\": "
                  + describe(tokens[n]) + ".")
        }
    }

    /// A token is one user's. Refused before anything is decrypted: one serial number (two keys
    /// of one device) assigned to two users, and, in a file store, a serial that another user's
    /// factor already has (the record of every user read: root's store on this host). In fleet
    /// mode the database refuses that in `enroll`, under a lock per serial, whichever hosts
    /// import at once (sql/api.sql), and the keys this import saved before it are removed again.
    static func refuseAssigned(_ serials: [[UInt8]], users: [String], assignments: [Assignment], store context: CallerContext?) throws(CommandError) {
        var first: [[UInt8]: Int] = [:]
        for (n, serial) in serials.enumerated() {
            if let m = first[serial], users[m] != users[n] {
                throw CLIError("\(shown(assignments[m].serial)) and \(shown(assignments[n].serial)) are one token (serial \(shown(serial))), "
                               + "assigned to \(users[m]) and \(users[n]); nothing was imported")
            }
            if first[serial] == nil { first[serial] = n }
        }
        guard let context, case .files(let files) = try context.openStore() else { return }
        for user in try storeCall({ () throws(MFAError) in try files.users() }) {
            let record: UserRecord?
            do { record = try files.read(user: user) } catch {
                throw CLIError("cannot read \(shown(user))'s record to check that no token is assigned twice (\(CLIError.text(error))); nothing was imported")
            }
            defer { record?.wipeSecretsInPlace() }
            for factor in record?.factors ?? [] where !factor.serial.isEmpty {
                guard let n = first[factor.serial], Array(users[n].utf8) != user else { continue }
                throw CLIError("serial \(shown(assignments[n].serial)) is already a token of \(shown(user)) (factor \"\(shown(factor.label))\")"
                               + ": remove it there first; nothing was imported")
            }
        }
    }

    /// The warnings for what the import takes on trust. RFC 6030's MACs cover encrypted
    /// values only (each `<ValueMAC>` is over its own IV and ciphertext): a value written in
    /// plain text, such as the `<Counter>` most vendors leave plain next to an encrypted
    /// secret, is imported as the file says even when someone changed it. One line per key
    /// with such a value (its value named, to check against the vendor's records), or one
    /// line for a file without encryption, whose values no MAC covers at all.
    static func uncovered(_ container: PSKCContainer, indices: [Int], tokens: [PSKCToken], assignments: [Assignment], file: String) -> [String] {
        guard container.isEncrypted else {
            return ["warning: \(file) is not encrypted and carries no MAC: no value in it is authenticated, and a changed one is imported as it is"]
        }
        var lines: [String] = []
        for (n, i) in indices.enumerated() where n < tokens.count && n < assignments.count && i < container.keys.count {
            let entry = container.keys[i]
            var values: [String] = []
            var counter = false
            if case .plain? = entry.counter {
                values.append("Counter (\(tokens[n].counter.map { "\($0)" } ?? "none"))")
                counter = true
            }
            if case .plain? = entry.timeInterval { values.append("TimeInterval (\(tokens[n].parameters.period))") }
            if case .plain? = entry.time { values.append("Time") }
            guard !values.isEmpty else { continue }
            lines.append("warning: serial \(shown(assignments[n].serial)): its \(values.joined(separator: " and ")) "
                         + (values.count == 1 ? "is" : "are") + " plain text, which no MAC in the file covers "
                         + "(RFC 6030 authenticates encrypted values only); check it against the vendor's records"
                         + (counter ? " (a counter set back lets the token's earlier codes log in again)" : ""))
        }
        return lines
    }

    func describe(_ t: PSKCToken) -> String {
        let hash: String
        switch t.parameters.algorithm { case .sha1: hash = "SHA-1"; case .sha256: hash = "SHA-256"; case .sha512: hash = "SHA-512" }
        switch t.kind {
        case .hotp: return "HOTP, \(hash), \(t.parameters.digits) digits, next counter \(t.counter ?? 0)"
        case .totp: return "TOTP, \(hash), \(t.parameters.digits) digits, \(t.parameters.period)-second steps"
        }
    }

    /// The index of the one HOTP/TOTP key whose serial number is `serial` (or, if no key has
    /// that serial number, whose Key Id is).
    static func resolve(_ serial: String, in container: PSKCContainer, file: String, lookup: KeyLookup) throws(CommandError) -> Int {
        let wanted = Array(serial.utf8)
        var matches = lookup.bySerial[wanted] ?? []
        if matches.isEmpty { matches = lookup.byId[wanted] ?? [] }
        guard !matches.isEmpty else { throw CLIError("serial \(shown(serial)) is not in \(file); nothing was imported") }
        let otp = matches.filter { container.keys[$0].kind != nil }
        guard let index = otp.first else {
            let algorithm = printable(Array(container.keys[matches[0]].algorithm.prefix(80))).string
            throw CLIError("serial \(shown(serial)) in \(file) is not an HOTP or TOTP key (its algorithm is \(algorithm)); nothing was imported")
        }
        guard otp.count == 1 else {
            throw CLIError("serial \(shown(serial)) names \(otp.count) HOTP/TOTP keys in \(file); which one is meant is not clear; nothing was imported")
        }
        return index
    }

    /// The file's keys by serial number and by Key Id (each look-up then costs the same with
    /// 10,000 keys as with one).
    struct KeyLookup {
        var bySerial: [[UInt8]: [Int]] = [:]
        var byId: [[UInt8]: [Int]] = [:]
        init(_ container: PSKCContainer) {
            for (i, k) in container.keys.enumerated() {
                if let serial = k.serial { bySerial[serial, default: []].append(i) }
                byId[k.id, default: []].append(i)
            }
        }
    }

    /// The assignments from --assign or --assign-file, each serial at most once.
    func readAssignments() throws(CommandError) -> [Assignment] {
        var out: [Assignment] = []
        if let assignFile {
            var text = try readBounded(assignFile, limit: 1024 * 1024, what: "the assignment file")
            defer { wipe(&text) }
            var number = 0
            for raw in text.split(separator: 0x0A, omittingEmptySubsequences: false) {
                number += 1
                let line = String(decoding: raw, as: UTF8.self).trimmingWhitespace()
                if line.isEmpty || line.hasPrefix("#") { continue }
                guard let comma = line.lastIndex(of: ",") else {
                    throw CLIError("\(shown(assignFile)) line \(number): not SERIAL,USER; nothing was imported")
                }
                let serial = String(line[..<comma]).trimmingWhitespace()
                let user = String(line[line.index(after: comma)...]).trimmingWhitespace()
                guard !serial.isEmpty, !user.isEmpty else {
                    throw CLIError("\(shown(assignFile)) line \(number): not SERIAL,USER; nothing was imported")
                }
                out.append(Assignment(serial: serial, user: user, origin: "\(shown(assignFile)) line \(number)"))
            }
        } else {
            for a in assign {
                guard let eq = a.lastIndex(of: "="), eq != a.startIndex, a.index(after: eq) != a.endIndex else {
                    throw CLIError("--assign \(shown(a)): not SERIAL=USER")
                }
                out.append(Assignment(serial: String(a[..<eq]), user: String(a[a.index(after: eq)...]), origin: "--assign"))
            }
        }
        guard !out.isEmpty else { throw CLIError("no assignments; nothing was imported") }
        var seen = Set<String>()
        for a in out where !seen.insert(a.serial).inserted {
            throw CLIError("serial \(shown(a.serial)) is assigned twice (\(a.origin)); nothing was imported")
        }
        return out
    }

    /// The key the file's values are encrypted with: none for a file without encryption, the
    /// pre-shared key from --key-file, or the one PBKDF2 derives from --passphrase-file.
    func encryptionKey(_ container: PSKCContainer, file shownFile: String) throws(CommandError) -> [UInt8]? {
        guard container.isEncrypted else {
            // The key says an encrypted file was expected: a plaintext one in its place may be a
            // replaced file (nothing authenticates a plaintext file).
            if keyFile != nil || passphraseFile != nil {
                throw CLIError("\(shownFile) is not encrypted, but --key-file or --passphrase-file expects an encrypted file: "
                               + "refused (a plaintext file carries no MAC); to import a plaintext file, leave the option out; nothing was imported")
            }
            return nil
        }
        switch container.protection {
        case .none:
            throw CLIError("\(shownFile) has encrypted values but no EncryptionKey; nothing was imported")
        case .preSharedKey(let keyName):
            guard let keyFile else {
                throw CLIError("\(shownFile) is encrypted with a pre-shared key\(keyName.isEmpty ? "" : " (\"" + shown(keyName) + "\")"): give it with --key-file; nothing was imported")
            }
            var text = try readBounded(keyFile, limit: Self.maxSideFileSize, what: "the key file", secret: true)
            defer { wipe(&text) }
            var key: [UInt8] = []
            key.reserveCapacity(text.count / 2 + 1)  // never grown: no copy of the key left in freed memory
            var high: UInt8? = nil
            for c in text where !(c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0D) {
                guard let v = Self.hexValue(c) else { wipe(&key); throw CLIError("\(shown(keyFile)) does not hold a key in hex; nothing was imported") }
                if let h = high { key.append(h << 4 | v); high = nil } else { high = v }
            }
            guard high == nil, [16, 24, 32].contains(key.count) else {
                wipe(&key)
                throw CLIError("\(shown(keyFile)) must hold an AES key of 16, 24 or 32 bytes in hex; nothing was imported")
            }
            return key
        case .passphrase(let p):
            guard let passphraseFile else {
                throw CLIError("\(shownFile) is encrypted with a passphrase (PBKDF2): give it with --passphrase-file; nothing was imported")
            }
            var passphrase = try readBounded(passphraseFile, limit: Self.maxSideFileSize, what: "the passphrase file", secret: true)
            defer { wipe(&passphrase) }
            if passphrase.last == 0x0A {
                passphrase.removeLast()
                if passphrase.last == 0x0D { passphrase.removeLast() }
            }
            guard !passphrase.isEmpty else { throw CLIError("\(shown(passphraseFile)) is empty; nothing was imported") }
            return try Self.pbkdf2(passphrase, p)
        }
    }

    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x61...0x66: return c - 0x61 + 10
        case 0x41...0x46: return c - 0x41 + 10
        default: return nil
        }
    }

    static func pbkdf2(_ passphrase: [UInt8], _ p: PSKCPBKDF2) throws(CommandError) -> [UInt8] {
        try LibCryptoAES.requireLibrary()
        let prf: Int32
        switch p.prf {
        case .sha1: prf = 1
        case .sha256: prf = 256
        case .sha512: prf = 512
        }
        var out = [UInt8](repeating: 0, count: p.keyLength)
        let rc = out.withUnsafeMutableBufferPointer { o in
            ccrypto_pbkdf2(passphrase, passphrase.count, p.salt, p.salt.count, UInt32(clamping: p.iterations), prf, o.baseAddress, o.count)
        }
        guard rc == 0 else { wipe(&out); throw CLIError("PBKDF2 failed; nothing was imported") }
        return out
    }
}

/// AES-CBC from libcrypto, for PSKCContainer (the library itself links no libcrypto).
struct LibCryptoAES: PSKCDecryptor {
    /// libcrypto loaded, or a clear error saying what to install.
    static func requireLibrary() throws(CommandError) {
        var why = [CChar](repeating: 0, count: 512)
        guard ccrypto_load(&why, why.count) != 0 else { return }
        let text = String(decoding: why.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        throw CLIError("an encrypted PSKC file needs OpenSSL's libcrypto (apt install libssl3): \(text); nothing was imported")
    }

    func decrypt(_ cipher: PSKCCipher, key: [UInt8], iv: [UInt8], ciphertext: [UInt8]) -> [UInt8]? {
        guard key.count == cipher.keyLength, iv.count == 16, !ciphertext.isEmpty, ciphertext.count % 16 == 0,
              ciphertext.count <= Int(Int32.max) - 32 else { return nil }
        var out = [UInt8](repeating: 0, count: ciphertext.count)
        var length = 0
        let rc = out.withUnsafeMutableBufferPointer { o in
            ccrypto_aes_cbc_decrypt(key, key.count, iv, ciphertext, ciphertext.count, o.baseAddress, &length)
        }
        guard rc == 0, length <= out.count else { wipe(&out); return nil }
        // Shortened in place: the padding is zeroed first.
        for i in length..<out.count { out[i] = 0 }
        out.removeLast(out.count - length)
        return out
    }
}

/// Reads a file root named (a regular file, at most `limit` bytes; a FIFO cannot hang us).
/// The bytes may hold secrets: the caller wipes them.
/// Like the store's own files: not a symbolic link, owned by root, writable by no one else
/// (anyone who could change a token file, key or passphrase could choose a user's secret); a
/// key or passphrase file readable by others is a warning (`secret`).
func readBounded(_ path: String, limit: Int, what: String, secret: Bool = false) throws(CommandError) -> [UInt8] {
    let fd = clibc_open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW, 0)
    guard fd >= 0 else {
        let e = Errno.current
        if e.rawValue == ELOOP { throw CLIError("\(what) \(shown(path)) is a symbolic link: give the file itself") }
        throw CLIError("cannot open \(what) \(shown(path)): \(e.text.string)")
    }
    defer { close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0 else { throw CLIError("cannot stat \(shown(path)): \(Errno.current.text.string)") }
    guard st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG) else { throw CLIError("\(shown(path)) is not a regular file") }
    guard st.st_uid == 0, st.st_mode & 0o022 == 0 else {
        throw CLIError("\(what) \(shown(path)) must be owned by root and writable by no one else (chown root, chmod go-w)")
    }
    if secret && st.st_mode & 0o044 != 0 { warn("warning: \(what) \(shown(path)) is readable by others: chmod 600 it") }
    guard st.st_size <= limit else { throw CLIError("\(shown(path)) is larger than \(limit / 1024) KiB") }
    var buffer = [UInt8](repeating: 0, count: limit + 1)
    var total = 0
    while total < buffer.count {
        let n = buffer.withUnsafeMutableBytes { b -> Int in
            guard let base = b.baseAddress else { return 0 }
            return read(fd, base + total, b.count - total)
        }
        if n < 0 {
            if clibc_errno() == EINTR { continue }
            let e = clibc_errno()
            wipe(&buffer)
            throw CLIError("cannot read \(shown(path)): \(Errno(e).text.string)")
        }
        if n == 0 { break }
        total += n
    }
    if total > limit { wipe(&buffer); throw CLIError("\(shown(path)) is larger than \(limit / 1024) KiB") }
    for i in total..<buffer.count { buffer[i] = 0 }
    buffer.removeLast(buffer.count - total)
    return buffer
}

extension String {
    func trimmingWhitespace() -> String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" || c == "\r" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" || c == "\r" { s = s.dropLast() }
        return String(s)
    }
}
