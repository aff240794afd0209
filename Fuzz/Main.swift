// One libFuzzer binary for every parser of outside bytes. It is built from the library's sources (with MFAWire's, MFAImport's, MFAPamStacks' and MFADaemon's)
// plus this directory as a single module (see `make fuzz`), so the harnesses can also reach
// internal entry points such as `UserState.parse(file:)` and `ModuleOptions.applyConfig`.
//
// The target is chosen by FUZZ_TARGET=<name> or the argument --target=<name> (libFuzzer
// ignores arguments that start with "--"); --list prints the names. Harness code is not
// the library: it may trap on purpose, and does so when a property (a round trip) fails.
import Glibc

struct FuzzTarget {
    let name: String
    let summary: String
    let run: @Sendable ([UInt8]) -> Void
}

let fuzzTargets: [FuzzTarget] = [
    FuzzTarget(name: "record", summary: "UserRecord.parse, round trip through serialized()", run: fuzzRecord),
    FuzzTarget(name: "state", summary: "UserState.parse(file:), as given and padded to a whole file; round trip through slotBytes()", run: fuzzState),
    FuzzTarget(name: "sends", summary: "DestinationLedger.parse (the store's .sends file); round trip through serialized()", run: fuzzSends),
    FuzzTarget(name: "config", summary: "ModuleOptions.applyConfig on a configuration file", run: fuzzConfig),
    FuzzTarget(name: "args", summary: "ModuleOptions.parse on module arguments (the input split at NUL bytes)", run: fuzzArguments),
    FuzzTarget(name: "uri", summary: "OTPAuthURI(parsing:), round trip through bytes", run: fuzzURI),
    FuzzTarget(name: "base32", summary: "Base32.decode (lenient) and the canonical form, round trips", run: fuzzBase32),
    FuzzTarget(name: "text", summary: "isPrintableText and escapedForTerminal, unescaped back", run: fuzzText),
    FuzzTarget(name: "gafile", summary: "GoogleAuthenticatorFile(parsing:)", run: fuzzGoogleAuthenticatorFile),
    FuzzTarget(name: "answer", summary: "TOTPVerifier.parseCode/match and RecoverySet.normalize on an answer", run: fuzzAnswer),
    FuzzTarget(name: "protocol", summary: "DaemonRequest.decode and DaemonReply.decode (pam-totpd's socket), round trips", run: fuzzProtocol),
    FuzzTarget(name: "pskc", summary: "XMLReader.parse and PSKCContainer(parsing:), its keys decrypted with a stand-in for AES", run: fuzzPSKC),
    FuzzTarget(name: "passwd", summary: "PasswdFile(parsing:) (pam-totpd's account cache) and PasswdFile.filesFirst on the same bytes", run: fuzzPasswd),
    FuzzTarget(name: "cli", summary: "Arguments (totp-enroll's and pam-totpd's command lines; the input split at NUL bytes) and the help of what was parsed", run: fuzzCommandLine),
    FuzzTarget(name: "admin", summary: "AdminRequest.decode and AdminReply.decode (totp-enroll to pam-totpd), round trips, no secret in a status", run: fuzzAdmin),
    FuzzTarget(name: "pamstack", summary: "PamStack.read on pam.d files made of the input (includes, substacks, brackets, limits)", run: fuzzPamStack),
    FuzzTarget(name: "hostcredential", summary: "HostCredential.parse (pam-totpd's host_credential file) and the credential it signs", run: fuzzHostCredential),
    FuzzTarget(name: "destination", summary: "Destination.validatePhone/validateEmail against a reference, their masks, MessageTemplate and render", run: fuzzDestination),
]

nonisolated(unsafe) var selectedTarget: (@Sendable ([UInt8]) -> Void)? = nil

/// Stops the fuzzer with a message: a property of a parser does not hold for this input.
func violated(_ target: StaticString, _ what: StaticString) -> Never {
    fatalError("\(target): \(what)")
}

func printError(_ text: String) {
    var line = Array(text.utf8)
    line.append(0x0A)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<Int32>,
                           _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    var name: String? = getenv("FUZZ_TARGET").map { String(cString: $0) }
    if let args = argv.pointee {
        for i in 0..<Int(argc.pointee) {
            guard let a = args[i] else { continue }
            let arg = String(cString: a)
            if arg == "--list" {
                for t in fuzzTargets { print(t.name + "\t" + t.summary) }
                exit(0)
            }
            if arg.hasPrefix("--target=") { name = String(arg.dropFirst("--target=".count)) }
        }
    }
    guard let name, let target = fuzzTargets.first(where: { $0.name == name }) else {
        printError("choose a target with FUZZ_TARGET=NAME or --target=NAME: "
                   + fuzzTargets.map(\.name).joined(separator: ", "))
        exit(2)
    }
    selectedTarget = target.run
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    selectedTarget?(bytes)
    return 0
}
