// The harnesses. Each one feeds the input to a parser (which must never trap, whatever the
// bytes) and checks what can be checked about the result: a round trip where a serializer
// exists, and the documented bounds of every value that was accepted.

// MARK: - The store

/// `<store>/<user>`: parse, and for a record that parses, serialize → parse gives it back and
/// serializing is stable.
func fuzzRecord(_ data: [UInt8]) {
    guard let record = try? UserRecord.parse(data) else { return }
    let bytes = record.serialized()
    guard let again = try? UserRecord.parse(bytes) else { violated("record", "a serialized record does not parse") }
    guard again == record else { violated("record", "serialize then parse changed the record") }
    guard again.serialized() == bytes else { violated("record", "serializing is not stable") }
    guard record.factors.count <= UserRecord.maxFactors else { violated("record", "more factors than maxFactors") }
    for f in record.factors {
        guard !f.label.isEmpty, f.label.count <= Factor.maxLabelLength, f.serial.count <= Factor.maxLabelLength,
              (try? f.data.validate()) != nil else { violated("record", "a factor out of range") }
        // Exactly one of a key (a device) and a destination (a sent code), as the kind says.
        guard (f.otpKey == nil) != (f.destination == nil), (f.channel == nil) == (f.otpKey != nil) else {
            violated("record", "a factor with the wrong payload for its kind")
        }
        if let key = f.otpKey {
            guard OTPParameters.digitsRange.contains(key.parameters.digits),
                  OTPParameters.periodRange.contains(key.parameters.period) else { violated("record", "a factor out of range") }
        }
    }
    if let r = record.recovery {
        guard r.hashes.count <= RecoverySet.maxCodes, r.hashes.allSatisfy({ $0.count == 32 }),
              RecoverySet.iterationRange.contains(UInt64(r.iterations)) else { violated("record", "recovery codes out of range") }
    }
}

/// `<store>/.state.<user>`. A state file has one fixed size, so besides the input as given the
/// harness also parses it cut or zero-padded to that size (most mutations change the length).
/// A state that parses, written back as one slot (the other zero, as after the first write),
/// parses to the same state.
func fuzzState(_ data: [UInt8]) {
    var file = data
    if data.count != UserState.fileSize {
        _ = UserState.parse(file: data)
        file = Array(data.prefix(UserState.fileSize))
        file += [UInt8](repeating: 0, count: UserState.fileSize - file.count)
    }
    guard let state = UserState.parse(file: file) else { return }
    let slot = state.slotBytes()
    guard slot.count == UserState.slotSize else { violated("state", "a parsed state does not fit a slot") }
    for second in [false, true] {
        let zero = [UInt8](repeating: 0, count: UserState.slotSize)
        guard let again = UserState.parse(file: second ? zero + slot : slot + zero) else {
            violated("state", "a written slot does not parse")
        }
        guard again == state else { violated("state", "write then parse changed the state") }
    }
}

/// The store's `.sends` file (sends per destination): any bytes parse or are refused, never
/// trap; a ledger that parses serializes to bytes that parse to the same ledger, and counting
/// and adding stay within their bounds.
func fuzzSends(_ data: [UInt8]) {
    guard let ledger = DestinationLedger.parse(data) else { return }
    guard ledger.entries.count <= DestinationLedger.maxEntries else { violated("sends", "more entries than the bound") }
    guard let again = DestinationLedger.parse(ledger.serialized()), again == ledger else {
        violated("sends", "serialize then parse changed the ledger")
    }
    var grown = ledger
    let key = ledger.entries.first?.key ?? [UInt8](repeating: 7, count: 32)
    let now = ledger.entries.last?.at ?? 0
    let before = grown.counts(key, at: now)
    grown.add(key, at: now)
    guard grown.entries.count <= DestinationLedger.maxEntries, grown.counts(key, at: now).day >= min(before.day, 1) else {
        violated("sends", "adding a send broke the bound or the count")
    }
}

// MARK: - The policy

/// `/etc/security/pam_totp.conf`, then the same options checked against their ranges. Sections
/// are resolved for the service "sudo" and a user in every group whose name starts with 'a'
/// (so some group sections apply and some do not); an exempt user always has its origin.
func fuzzConfig(_ data: [UInt8]) {
    var options = ModuleOptions()
    do throws(MFAError) {
        try options.applyConfig(data, file: "fuzz.conf", service: Array("sudo".utf8)) { (group) throws(MFAError) -> Bool in
            group.first == 0x61
        }
        if options.exempt && options.exemptBy.isEmpty { violated("config", "exempt without the section that set it") }
    } catch {
        guard case .invalidOption = error else { violated("config", "an error other than invalidOption") }
        return
    }
    checkBounds(options, "config")
}

/// The module arguments from pam.d (argv): the input split at NUL bytes, as C strings are.
func fuzzArguments(_ data: [UInt8]) {
    let arguments = data.split(separator: 0, omittingEmptySubsequences: false).map { Array($0) }
    let options: ModuleOptions
    do throws(MFAError) {
        options = try ModuleOptions.parse(arguments)
    } catch {
        guard case .invalidOption = error else { violated("args", "an error other than invalidOption") }
        return
    }
    checkBounds(options, "args")
}

func checkBounds(_ o: ModuleOptions, _ target: StaticString) {
    guard o.adjacentIntervals >= 0, o.adjacentIntervals <= TOTPVerifier.maxAdjacentIntervals,
          ModuleOptions.maxFailuresRange.contains(UInt64(o.maxFailures)),
          o.lockoutSeconds >= 0, ModuleOptions.lockoutRange.contains(UInt64(o.lockoutSeconds)),
          o.store.first == 0x2F, !o.store.contains(0),
          !o.prompt.isEmpty, o.prompt.count <= 128, !o.prompt.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
        violated(target, "an accepted option is out of its range")
    }
}

// MARK: - Enrolment input

/// `otpauth://totp/...`: a URI that parses gives the same value again from its own bytes.
func fuzzURI(_ data: [UInt8]) {
    guard let uri = try? OTPAuthURI(parsing: data) else { return }
    guard !uri.secret.isEmpty else { violated("uri", "an empty secret was accepted") }
    let bytes = uri.bytes
    guard let again = try? OTPAuthURI(parsing: bytes) else { violated("uri", "a serialized URI does not parse") }
    guard again == uri else { violated("uri", "serialize then parse changed the URI") }
    guard again.bytes == bytes else { violated("uri", "serializing is not stable") }
}

/// Base32 as people type it (lenient: case, spaces, hyphens, optional padding) and the
/// canonical form the tools write: bytes → text → bytes is the identity; decoded text
/// re-encodes to a canonical text that decodes to the same bytes; and canonical text (upper
/// case, no separators, no padding, zero trailing bits) is exactly what encoding gives.
func fuzzBase32(_ data: [UInt8]) {
    for padding in [false, true] {
        let text = Base32.encode(data, padding: padding)
        guard let back = try? Base32.decode(text), back == data else { violated("base32", "encode then decode is not the identity") }
    }
    guard let decoded = try? Base32.decode(data) else { return }
    guard decoded.count <= data.count * 5 / 8 else { violated("base32", "more bytes decoded than the text holds") }
    let canonical = Base32.encode(decoded)
    guard let again = try? Base32.decode(canonical), again == decoded else { violated("base32", "decoded bytes do not round-trip") }
    let isCanonicalText = data.allSatisfy { ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x32 && $0 <= 0x37) }
    if isCanonicalText && canonical != data {
        // Only non-zero trailing bits in the last symbol may differ (the decoder ignores them).
        guard canonical.count == data.count, canonical.dropLast().elementsEqual(data.dropLast()) else {
            violated("base32", "canonical text does not re-encode to itself")
        }
    }
}

/// `~/.google_authenticator`: an accepted file has the documented values; a refused one has
/// a short printable message (it never echoes the file: no secret, no code).
func fuzzGoogleAuthenticatorFile(_ data: [UInt8]) {
    var file: GoogleAuthenticatorFile
    do throws(MFAError) {
        file = try GoogleAuthenticatorFile(parsing: data)
    } catch {
        guard case .invalidParameters(let message) = error else { violated("gafile", "an error other than invalidParameters") }
        guard !message.bytes.isEmpty, message.bytes.count <= 200,
              message.bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            violated("gafile", "an error message that is empty, long or not printable")
        }
        return
    }
    guard file.totp, file.secret.count >= 10, file.secret.count <= 128,
          file.scratchCodes.count <= RecoverySet.maxCodes,
          file.scratchCodes.allSatisfy({ $0.count == 8 && $0.allSatisfy(ASCII.isDigit) && $0.first != ASCII.zero }),
          file.stepSize.map({ (1...60).contains($0) }) ?? true,
          file.windowSize.map({ (1...100).contains($0) }) ?? true,
          file.timeSkew.map({ $0.magnitude <= 1_000_000 }) ?? true else {
        violated("gafile", "an accepted file has a value out of range")
    }
    file.erase()
    guard file.secret.isEmpty, file.scratchCodes.isEmpty else { violated("gafile", "erase left data behind") }
}

/// Text from users and from the store on its way to a terminal or a log: `isPrintableText`
/// accepts only valid UTF-8 (checked against the standard library's decoder),
/// `escapedForTerminal` always gives printable text that leaves printable text without a
/// backslash as it is, and the input can be recovered from it (the harness unescapes it).
func fuzzText(_ data: [UInt8]) {
    let printable = isPrintableText(data)
    if printable {
        guard String(validating: data, as: UTF8.self) != nil else { violated("text", "invalid UTF-8 counted as printable") }
        guard !data.contains(where: { $0 < 0x20 || $0 == 0x7F }) else { violated("text", "an ASCII control counted as printable") }
    }
    let escaped = escapedForTerminal(data)
    guard isPrintableText(escaped) else { violated("text", "escaped text is not printable") }
    if printable && !data.contains(0x5C) && escaped != data { violated("text", "printable text was changed") }
    guard unescape(escaped) == data else { violated("text", "the input cannot be recovered from the escaped text") }
}

/// The inverse of `escapedForTerminal`: `\\`, `\xHH`, `\u{HEX}` (as UTF-8); nil on anything else
/// after a backslash.
func unescape(_ text: [UInt8]) -> [UInt8]? {
    func hexValue(_ bytes: ArraySlice<UInt8>) -> UInt32? {
        guard !bytes.isEmpty, bytes.count <= 8 else { return nil }
        var v: UInt32 = 0
        for c in bytes {
            guard let n = Hex.nibble(c) else { return nil }
            v = v << 4 | UInt32(n)
        }
        return v
    }
    var out: [UInt8] = []
    var i = 0
    while i < text.count {
        guard text[i] == 0x5C else { out.append(text[i]); i += 1; continue }
        guard i + 1 < text.count else { return nil }
        switch text[i + 1] {
        case 0x5C:
            out.append(0x5C)
            i += 2
        case 0x78:  // x
            guard i + 3 < text.count, let v = hexValue(text[(i + 2)...(i + 3)]) else { return nil }
            out.append(UInt8(v))
            i += 4
        case 0x75:  // u{...}
            guard i + 2 < text.count, text[i + 2] == 0x7B, let close = text[(i + 3)...].firstIndex(of: 0x7D),
                  let v = hexValue(text[(i + 3)..<close]), let scalar = Unicode.Scalar(v) else { return nil }
            out += Array(String(Character(scalar)).utf8)
            i = close + 1
        default:
            return nil
        }
    }
    return out
}

// MARK: - The login

/// A fixed key for the answer target (RFC 6238's SHA-1 test key) and a fixed time.
let answerKey = HMACKey(algorithm: .sha1, key: Array("12345678901234567890".utf8))
let answerTime: Int64 = 1_111_111_109
let answerVerifier: TOTPVerifier = {
    guard let v = try? TOTPVerifier(adjacentIntervals: 1) else { violated("answer", "adjacent_intervals=1 refused") }
    return v
}()

/// What the module does with the text typed at its prompt: the code parser, the verifier with
/// a fixed key (a malformed answer never matches, never counts as a replay; the right code
/// matches) and the recovery-code normalizer.
func fuzzAnswer(_ data: [UInt8]) {
    let onlyDigits = data.allSatisfy(ASCII.isDigit)
    for digits in OTPParameters.digitsRange {
        let code = TOTPVerifier.parseCode(data, digits: digits)
        guard (code != nil) == (data.count == digits && onlyDigits) else { violated("answer", "parseCode accepted a malformed code") }
        guard let parameters = try? OTPParameters(algorithm: .sha1, digits: digits, period: 30),
              let result = try? answerVerifier.match(answer: data, key: answerKey, parameters: parameters,
                                                     at: answerTime, usedUpTo: 1_111_111_109 / 30 - 1) else {
            violated("answer", "match threw")
        }
        if code == nil && (result.step != nil || result.replayed) { violated("answer", "a malformed answer matched") }
        if let step = result.step {
            guard step == 1_111_111_109 / 30 || step == 1_111_111_109 / 30 + 1,
                  HOTP.code(key: answerKey, counter: step, digits: digits) == data else {
                violated("answer", "matched a step whose code differs")
            }
        }
    }
    if let digits = RecoverySet.normalize(data) {
        guard digits.count >= 8, digits.count <= 32, digits.allSatisfy(ASCII.isDigit),
              data.allSatisfy({ ASCII.isDigit($0) || $0 == 0x2D || $0 == 0x20 }) else {
            violated("answer", "normalize accepted something that is not a recovery code")
        }
    } else if data.allSatisfy({ ASCII.isDigit($0) || $0 == 0x2D || $0 == 0x20 }) {
        let n = data.filter(ASCII.isDigit).count
        guard n < 8 || n > 32 else { violated("answer", "normalize refused a recovery code") }
    }
    // The right code at the fixed time is accepted (a sanity check that the target can match).
    if data.isEmpty {
        let right = HOTP.code(key: answerKey, counter: 1_111_111_109 / 30, digits: 8)
        let parameters = try? OTPParameters(algorithm: .sha1, digits: 8, period: 30)
        guard let parameters, (try? answerVerifier.verify(answer: right, key: answerKey, parameters: parameters,
                                                          at: answerTime)) == 1_111_111_109 / 30 else {
            violated("answer", "the right code does not match")
        }
    }
}

/// Both ends of the pam-totpd socket: whatever decodes re-encodes to the same frame, and the
/// header's length agrees with the frame.
func fuzzProtocol(_ data: [UInt8]) {
    if let request = try? DaemonRequest.decode(data) {
        guard DaemonProtocol.frameLength(header: data.prefix(DaemonProtocol.headerSize), reply: false) == data.count else {
            violated("protocol", "a request decoded from a frame of another length")
        }
        guard let again = request.encoded(), (try? DaemonRequest.decode(again)) == request else {
            violated("protocol", "request round trip")
        }
    }
    if let reply = try? DaemonReply.decode(data) {
        guard (try? DaemonReply.decode(reply.encoded())) == reply else { violated("protocol", "reply round trip") }
    }
}

/// totp-enroll's requests to pam-totpd (AdminProtocol) and their replies: decode, and what
/// decodes encodes back to the same message; a status never carries a secret out.
func fuzzAdmin(_ data: [UInt8]) {
    if let request = try? AdminRequest.decode(data) {
        guard DaemonProtocol.adminFrameLength(header: data.prefix(DaemonProtocol.headerSize), reply: false) == data.count else {
            violated("admin", "a request decoded from a frame of another length")
        }
        guard let again = request.encoded(), (try? AdminRequest.decode(again)) == request else { violated("admin", "request round trip") }
    }
    if let reply = try? AdminReply.decode(data) {
        guard (try? AdminReply.decode(reply.encoded())) == reply else { violated("admin", "reply round trip") }
        if case .status(let s?) = reply {
            // No factor carries a secret out.
            guard s.record.factors.allSatisfy({ ($0.otpKey?.secret ?? []).isEmpty }) else {
                violated("admin", "a status with a secret")
            }
        }
    }
}

// MARK: - Hardware tokens

/// A stand-in for AES-CBC (the fuzz binary links no libcrypto): the "plaintext" is the
/// ciphertext without its PKCS#7-like padding (the last byte, 1–16, says how much); any other
/// last byte is bad padding. Enough to reach every path after decryption.
struct FuzzDecryptor: PSKCDecryptor {
    func decrypt(_ cipher: PSKCCipher, key: [UInt8], iv: [UInt8], ciphertext: [UInt8]) -> [UInt8]? {
        guard key.count == cipher.keyLength, iv.count == 16, let last = ciphertext.last, last >= 1, last <= 16,
              Int(last) <= ciphertext.count else { return nil }
        return Array(ciphertext.dropLast(Int(last)))
    }
}

/// An error of the XML reader or the PSKC model: invalidParameters with a short printable
/// message (it never quotes the document, which may hold a secret).
func checkPSKCError(_ error: MFAError) {
    guard case .invalidParameters(let message) = error else { violated("pskc", "an error other than invalidParameters") }
    guard !message.bytes.isEmpty, message.bytes.count <= 400, message.bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
        violated("pskc", "an error message that is empty, long or not printable")
    }
}

/// PSKC files (totp-enroll import-pskc): the XML reader, then the container, then its keys
/// with a fixed key and the stand-in decryptor. Accepted trees stay within the reader's
/// bounds; tokens that come out are within what pam_totp enrols.
func fuzzPSKC(_ data: [UInt8]) {
    do throws(MFAError) {
        let root = try XMLReader.parse(data)
        func depth(_ e: XMLElementNode) -> Int { 1 + (e.children.map(depth).max() ?? 0) }
        guard depth(root) <= XMLReader.maxDepth else { violated("pskc", "a tree deeper than maxDepth") }
        guard !root.name.isEmpty, !root.name.contains(0x3A) else { violated("pskc", "an element name empty or with its prefix") }
    } catch {
        checkPSKCError(error)
    }
    let container: PSKCContainer
    do throws(MFAError) { container = try PSKCContainer(parsing: data) } catch { checkPSKCError(error); return }
    let key: [UInt8]? = container.isEncrypted ? [UInt8](repeating: 0x11, count: 16) : nil
    let chosen = Array(container.keys.indices.prefix(8))
    do throws(MFAError) {
        let tokens = try container.tokens(chosen, encryptionKey: key, decryptor: FuzzDecryptor())
        guard tokens.count == chosen.count else { violated("pskc", "not one token per key") }
        for t in tokens {
            guard t.secret.count >= 10, t.secret.count <= 128,
                  OTPParameters.digitsRange.contains(t.parameters.digits), OTPParameters.periodRange.contains(t.parameters.period),
                  (t.kind == .hotp) == (t.counter != nil), (t.counter ?? 0) < HOTPWindow.maxCounter else {
                violated("pskc", "a token out of range")
            }
        }
    } catch {
        checkPSKCError(error)
    }
    do throws(MFAError) {
        let values = try container.decryptedValues(encryptionKey: key, decryptor: FuzzDecryptor())
        guard values.count == container.keys.count else { violated("pskc", "not one set of values per key") }
    } catch {
        checkPSKCError(error)
    }
}

/// /etc/passwd and nsswitch.conf as pam-totpd's account cache reads them: no trap, and every
/// name it keeps is one a line of the input starts with.
func fuzzPasswd(_ data: [UInt8]) {
    _ = PasswdFile.filesFirst(nsswitch: data)
    guard let file = PasswdFile(parsing: data) else { return }
    for name in file.uids.keys {
        guard !name.isEmpty, !name.contains(0x3A), !name.contains(0x0A) else { violated("passwd", "a name with a separator") }
        var atLineStart = false
        var i = 0
        while i + name.count < data.count {
            if (i == 0 || data[i - 1] == 0x0A) && Array(data[i..<(i + name.count)]) == name && data[i + name.count] == 0x3A {
                atLineStart = true
                break
            }
            i += 1
        }
        guard atLineStart else { violated("passwd", "a name no line starts with") }
    }
}

/// The command line of a set-uid program is outside bytes: every argument list parses or is
/// refused with a message, and the values read back are the ones given.
struct FuzzedCommand: Command {
    static let name = "fuzzed"
    static let abstract = "A command with every kind of argument."
    static let specs: [ArgumentSpec] = [
        .argument("FILE", "a file", required: false), .option("--user", "NAME", "a user"), .repeated("--assign", "SERIAL=USER", "repeatable"),
        .flag("--json", "a flag"), .option("--digits", "N", "a number"), .option("--qr", "STYLE", "a choice"),
    ]
    init(_ arguments: Arguments) throws(CommandError) {
        _ = try arguments.integer("--digits", Int.self)
        _ = try arguments.integer("--digits", UInt64.self)
        _ = try arguments.choice("--qr", ["utf8", "ansi", "none"])
    }
    func run() throws(CommandError) {}
}

func fuzzCommandLine(_ data: [UInt8]) {
    let arguments = data.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
    do {
        let parsed = try Arguments(arguments, specs: FuzzedCommand.specs)
        if let user = parsed.string("--user"), !arguments.contains(user) && !arguments.contains("--user=" + user) {
            violated("cli", "--user's value is not one that was given")
        }
        if let file = parsed.argument("FILE"), !arguments.contains(file) { violated("cli", "a positional that was not given") }
        _ = try? FuzzedCommand(parsed)
    } catch {
        if error.description.isEmpty { violated("cli", "a refusal without a message") }
    }
    let command = Subcommand(FuzzedCommand.self)
    let program = Program(name: "fuzz", abstract: arguments.first ?? "", root: command, rootIsSubcommand: true,
                          subcommands: [command])
    _ = program.topHelp()
    _ = program.help(command)
}

// MARK: - Out-of-band destinations

/// Text-message and email factors: `Destination.validatePhone` and `validateEmail` agree with
/// a second, plainer statement of their rules here; an accepted destination's mask has the
/// documented shape; every mask is printable ASCII (phone) or printable text (email) whatever
/// the input, and a phone mask hides all but five characters (four when it is no number).
/// `MessageTemplate`: the input as a template (with and without `needsCode`), refused only
/// with `invalidOption`; an accepted one renders to printable text that holds the code, also
/// with the input itself as the host name (values never bring a control character in).
func fuzzDestination(_ data: [UInt8]) {
    fuzzPhone(data)
    fuzzEmail(data)
    fuzzTemplate(data)
}

func fuzzIsDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }
func fuzzIsLetter(_ c: UInt8) -> Bool { (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) }

/// A validation's refusal: only `invalidParameters`, with a short printable message.
func fuzzRefusal(_ body: () throws(MFAError) -> Void) -> Message? {
    do throws(MFAError) { try body() } catch {
        guard case .invalidParameters(let m) = error else { violated("destination", "an error other than invalidParameters") }
        guard !m.bytes.isEmpty, m.bytes.count <= 200, m.bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            violated("destination", "an error message that is empty, long or not printable")
        }
        return m
    }
    return nil
}

/// E.164: validatePhone agrees with the reference; the mask shows at most the country's first
/// digit and the last four.
func fuzzPhone(_ data: [UInt8]) {
    let phoneOK = fuzzRefusal({ () throws(MFAError) in try Destination.validatePhone(data) }) == nil
    let e164 = data.count >= 9 && data.count <= 16 && data[0] == 0x2B && data[1] != 0x30 && data.dropFirst().allSatisfy(fuzzIsDigit)
    guard phoneOK == e164 else { violated("destination", "validatePhone disagrees with E.164") }
    let phoneMask = Destination.maskPhone(data)
    guard phoneMask.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }), phoneMask.first == 0x2B else {
        violated("destination", "a phone mask that is not printable ASCII after +")
    }
    let body = data.first == 0x2B ? Array(data.dropFirst()) : data
    let shown = phoneMask.dropFirst().filter { $0 != 0x2A }.count
    guard phoneMask.count == body.count + 1, shown <= (body.count >= 8 ? 5 : max(0, body.count - 4)) else {
        violated("destination", "a phone mask shows too much")
    }
    if phoneOK {
        let expected = [0x2B, data[1]] + [UInt8](repeating: 0x2A, count: data.count - 6) + Array(data.suffix(4))
        guard phoneMask == expected else { violated("destination", "a number's mask is not +D***DDDD") }
    }
}

/// Email addresses: validateEmail agrees with the reference; the mask is a***@domain.
func fuzzEmail(_ data: [UInt8]) {
    let emailOK = fuzzRefusal({ () throws(MFAError) in try Destination.validateEmail(data) }) == nil
    let parts = data.split(separator: 0x40, omittingEmptySubsequences: false)
    var reference = parts.count == 2 && data.count <= 254
    if reference {
        let local = parts[0], domain = parts[1]
        let atext = Array("!#$%&'*+-/=?^_`{|}~".utf8)
        let words = local.split(separator: 0x2E, omittingEmptySubsequences: false)
        let labels = domain.split(separator: 0x2E, omittingEmptySubsequences: false)
        reference = local.count >= 1 && local.count <= 64
            && words.allSatisfy { !$0.isEmpty && $0.allSatisfy { fuzzIsLetter($0) || fuzzIsDigit($0) || atext.contains($0) } }
            && local.first != 0x2D && local.first != 0x7C && local.first != 0x2F
            && labels.count >= 2
            && labels.allSatisfy { l in
                !l.isEmpty && l.count <= 63 && l.first != 0x2D && l.last != 0x2D
                    && l.allSatisfy { fuzzIsLetter($0) || fuzzIsDigit($0) || $0 == 0x2D }
            }
            && !(labels.last ?? []).allSatisfy(fuzzIsDigit)
    }
    guard emailOK == reference else { violated("destination", "validateEmail disagrees with the reference") }
    let emailMask = Destination.maskEmail(data)
    guard isPrintableText(emailMask) else { violated("destination", "an email mask that is not printable") }
    if emailOK {
        guard emailMask == [data[0], 0x2A, 0x2A, 0x2A, 0x40] + Array(parts[1]) else {
            violated("destination", "an address's mask is not a***@domain")
        }
    } else if let at = data.firstIndex(of: 0x40) {
        guard emailMask.count <= 5 + 4 * (data.count - at) else { violated("destination", "an email mask too long") }
    }
}

/// Message templates: refused only with `invalidOption`; an accepted one renders printable text
/// that holds the code, also with the input itself as the host name.
func fuzzTemplate(_ data: [UInt8]) {
    for needsCode in [false, true] {
        let template: MessageTemplate
        do throws(MFAError) {
            template = try MessageTemplate(data, needsCode: needsCode)
        } catch {
            guard case .invalidOption(let m) = error, !m.bytes.isEmpty,
                  m.bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { violated("destination", "a template refused oddly") }
            continue
        }
        guard !data.isEmpty, data.count <= MessageTemplate.maxLength, isPrintableText(data), template.text == data else {
            violated("destination", "a template out of bounds accepted")
        }
        let code = Array("73914582".utf8)
        for host in [Array("web1.example.com".utf8), data] {
            let out = template.render(code: code, host: host, minutes: 5)
            guard isPrintableText(out) else { violated("destination", "a rendered message is not printable") }
            if needsCode {
                guard out.count >= code.count,
                      (0...(out.count - code.count)).contains(where: { out[$0..<($0 + code.count)].elementsEqual(code) }) else {
                    violated("destination", "a rendered message without the code")
                }
            }
        }
        // Without escapes the text is sent as it is.
        if !data.contains(0x25) && template.render(code: code, host: [], minutes: 1) != data {
            violated("destination", "a template without escapes was changed")
        }
    }
}

// MARK: - PAM stacks

/// The files of one stack for `pamstack`: the input split at NUL bytes, the pieces in turn the
/// service file and the files `a`, `b`, `c` and `other` of the pam.d directory `/p` and the
/// absolute `/abs` (so @include, include and substack lines in the seeds find each other).
let pamStackNames: [[UInt8]] = ["/p/svc", "/p/a", "/p/b", "/p/c", "/p/other", "/abs"].map { Array($0.utf8) }

/// PamStack.read over files made of the input: never traps, reads at most maxFiles files, keeps
/// at most maxEntries lines, follows at most maxDepth includes, and every entry points at a
/// line of a file that exists; the word splitter and line joiner on the raw input too.
func fuzzPamStack(_ data: [UInt8]) {
    let pieces = data.split(separator: 0, maxSplits: pamStackNames.count - 1, omittingEmptySubsequences: false).map { Array($0) }
    var files: [(name: [UInt8], text: [UInt8])] = []
    for (i, piece) in pieces.enumerated() where i < pamStackNames.count { files.append((pamStackNames[i], piece)) }
    final class Counter: @unchecked Sendable { var reads = 0 }
    let counter = Counter()
    let snapshot = files
    let stack = PamStack.read(service: Array("svc".utf8), directory: Array("/p".utf8)) { path in
        counter.reads += 1
        return snapshot.first(where: { $0.name == path })?.text
    }
    guard counter.reads <= PamStack.maxFiles else { violated("pamstack", "more files read than maxFiles") }
    guard stack.entries.count <= PamStack.maxEntries else { violated("pamstack", "more entries than maxEntries") }
    guard stack.problems.count <= PamStack.maxProblems else { violated("pamstack", "more problems than maxProblems") }
    // Each file's line count once (an entry per line of a large file made this quadratic).
    let lineCounts = files.map { f in f.text.reduce(1) { $1 == 0x0A ? $0 + 1 : $0 } }
    for e in stack.entries {
        guard e.depth >= 0, e.depth <= PamStack.maxDepth, e.line >= 1 else { violated("pamstack", "an entry out of bounds") }
        guard let index = files.firstIndex(where: { $0.name == e.file }) else { violated("pamstack", "an entry from a file that does not exist") }
        guard e.line <= lineCounts[index] else { violated("pamstack", "an entry past its file's last line") }
        if e.kind == .module {
            guard !e.module.isEmpty, !e.control.isEmpty else { violated("pamstack", "a module line without module or control") }
            guard e.moduleName.count <= e.module.count else { violated("pamstack", "a module name longer than its path") }
        }
    }
    for p in stack.problems where p.text.isEmpty { violated("pamstack", "an empty problem") }
    _ = stack.modules(named: Array("pam_totp.so".utf8))
    let logical = PamStack.logicalLines(data)
    guard logical.count <= data.count + 1 else { violated("pamstack", "more logical lines than the input holds") }
    for l in logical.prefix(64) { _ = PamStack.words(l.text) }
}

/// HostCredential.parse (pam-totpd's host_credential file): only a well-formed line parses, its
/// name is one the database takes, and what it signs has identify's shape.
func fuzzHostCredential(_ data: [UInt8]) {
    guard let c = HostCredential.parse(data) else { return }
    guard HostCredential.validName(Array(c.host.utf8)) else { violated("hostcredential", "a name the database refuses") }
    var line = data
    if line.last == 0x0A { line.removeLast() }
    guard line.count == 17 + c.host.utf8.count + 1 + 64 else { violated("hostcredential", "a line of another length parsed") }
    let signed = c.credential(operation: "enrolled", arguments: [String(decoding: data, as: UTF8.self), nil], stamp: 1, nonce: [UInt8](repeating: 0, count: 16))
    let parts = signed.split(separator: ":", omittingEmptySubsequences: false)
    guard parts.count == 5, parts[0] == "v1", parts[1] == Substring(c.host), parts[3].utf8.count == 32, parts[4].utf8.count == 64 else {
        violated("hostcredential", "a credential not of identify's shape")
    }
}
