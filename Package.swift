// swift-tools-version: 6.0
//
// Two builds from one manifest (docs/ARCHITECTURE.md, section 3):
//   swift build / swift test            -> everything, normal Swift (development, the tests)
//   PAM_TOTP_EMBEDDED=1 swift build ... -> what ships, in Embedded Swift (no Swift runtime): the
//                                          library + PamTOTP (pam_totp.so, libc+libpam only),
//                                          pam-totpd and totp-enroll
import PackageDescription
import Foundation

let embedded = ProcessInfo.processInfo.environment["PAM_TOTP_EMBEDDED"] == "1"

// PAM_TOTP_MODULE=1 (the Makefile's pam_totp.so, in a scratch path of its own): every target the
// module links but MFACrypto optimised for size. pam_totp.so is then 202 KB instead of 243 KB
// stripped (the 200 KiB budget, docs/benchmarks.md) for about 4% more instructions a login;
// the hashes keep -O (their unrolled rounds are most of a login's work), and pam-totpd and
// totp-enroll, built without it, keep -O throughout.
let moduleBuild = ProcessInfo.processInfo.environment["PAM_TOTP_MODULE"] == "1"
func embeddedFlags(_ optimisation: String) -> [SwiftSetting] {
    [.enableExperimentalFeature("Embedded"), .unsafeFlags(["-wmo", "-Xcc", "-fPIC", optimisation, "-Xfrontend", "-function-sections"])]
}
let embeddedSwift: [SwiftSetting] = embedded ? embeddedFlags(moduleBuild ? "-Osize" : "-O") : []
let cryptoSwift: [SwiftSetting] = embedded ? embeddedFlags("-O") : [.unsafeFlags(["-O"], .when(configuration: .debug))]

// Every binary binds all symbols at load and keeps its relocated data read-only (full RELRO):
// totp-enroll runs set-uid root, pam-totpd as root, and libpam loads the module with RTLD_NOW
// anyway. (lintian: hardening-no-bindnow.)
let hardenedLinking: [String] = ["-Xlinker", "-z", "-Xlinker", "now", "-Xlinker", "-z", "-Xlinker", "relro"]

let pamModuleLinker: [LinkerSetting] = [
    .linkedLibrary("pam"),
    .unsafeFlags(hardenedLinking + [
        "-Xlinker", "--version-script=\(Context.packageDirectory)/Sources/PamTOTP/exports.map",
        "-Xlinker", "--no-undefined",
        // With -function-sections above: drop every function the module does not reach
        // (the library also holds what only totp-enroll uses). 196 KB -> 93 KB stripped.
        "-Xlinker", "--gc-sections",
    ] + (embedded ? [
        // lld folds identical functions (many generic specialisations are the same code; the
        // module never compares function addresses) and, without a separate read-only segment,
        // pads less: 212,904 -> 207,040 B stripped, and fewer instructions per login (make bench).
        "-use-ld=lld", "-Xlinker", "--icf=all", "-Xlinker", "--no-rosegment",
    ] : [])),
]

let librarySettings: [SwiftSetting] = embedded ? embeddedSwift : [.unsafeFlags(["-O"], .when(configuration: .debug))]
let library: [Target.Dependency] = ["MFASystem", "MFACrypto", "MFAPolicy", "MFAFileStore"]

var targets: [Target] = [
    .systemLibrary(name: "CLibc", path: "Sources/CLibc"),
    .systemLibrary(name: "CPAM", path: "Sources/CPAM"),
    // The library, by job (docs/ARCHITECTURE.md, section 9); each compiles normally and in Embedded
    // Swift. Optimised in debug builds too: the tests run the hashes (PBKDF2, thousands of HMACs)
    // and the generic SHA-2 unspecialised at -Onone is an order of magnitude slower.
    //   MFASystem     errors and their text, bytes, text checks, the system-call layer
    //   MFACrypto     SHA-1/2, HMAC, HOTP/TOTP and the code window, Base32, secrets, recovery hashing
    //   MFAPolicy     options and the site's file, factor kinds, the verdict, the store interface
    //   MFAFileStore  the file store: records, state slots, locks, the operations on them
    .target(name: "MFASystem", dependencies: ["CLibc"], swiftSettings: librarySettings),
    .target(name: "MFACrypto", dependencies: ["MFASystem", "CLibc"], swiftSettings: cryptoSwift),
    .target(name: "MFAPolicy", dependencies: ["MFASystem", "MFACrypto", "CLibc"], swiftSettings: librarySettings),
    .target(name: "MFAFileStore", dependencies: ["MFASystem", "MFACrypto", "MFAPolicy", "CLibc"],
            swiftSettings: librarySettings),
    // The protocols with pam-totpd: the module's (frames, requests and replies, the client's one
    // bounded exchange over a Unix socket) and totp-enroll's admin codec with its audit events
    // and its store over the daemon (DaemonStore). The module links only what it calls.
    .target(name: "MFAWire", dependencies: ["MFASystem", "MFACrypto", "MFAPolicy", "MFAFileStore", "CLibc"], swiftSettings: embeddedSwift),
    .target(
        name: "PamTOTP", dependencies: library + ["MFAWire", "CLibc", "CPAM"], exclude: ["exports.map"],
        swiftSettings: embeddedSwift, linkerSettings: pamModuleLinker),
    // Bench-only (`make bench`, scripts/bench.sh; never installed): TOTPVerifier.match and its
    // HMACs behind two fixed symbol names for callgrind. Built in both modes, so `make bench`
    // measures the Embedded code that ships.
    .executableTarget(
        name: "verify-bench", dependencies: ["MFASystem", "MFACrypto", "MFACommandLine", "CLibc"], path: "Tests/VerifyBench",
        swiftSettings: embeddedSwift),
]
// The programs and what only they use, in both builds: the Embedded one is what ships
// (docs/ARCHITECTURE.md, section 3: no Swift runtime in the binaries, under 1 MB each instead of
// 7-9 MB); the normal one is for development and the tests' own use of the library.
let programSwift: [SwiftSetting] = embedded ? embeddedSwift : []
let programLinker: [LinkerSetting] = embedded
    // As for the module: drop what a program does not reach, fold identical functions; libm
    // (the normal build gets it through the Swift runtime).
    ? [.linkedLibrary("m"), .unsafeFlags(hardenedLinking + ["-Xlinker", "--gc-sections", "-use-ld=lld", "-Xlinker", "--icf=all"])]
    : [.unsafeFlags(hardenedLinking)]
targets += [
    // Fleet mode (docs/ARCHITECTURE.md, section 8): libpq (Debian: libpq-dev) and the PostgreSQL
    // store, linked by pam-totpd only; pam_totp.so never links a database or TLS client.
    .target(name: "CLibPQ", path: "Sources/CLibPQ", linkerSettings: [.linkedLibrary("dl"), .linkedLibrary("pthread")]),
    .systemLibrary(name: "CQREncode", path: "Sources/CQREncode"),
    // OpenSSL's libcrypto (Debian: libssl3), loaded at run time by import-pskc for an encrypted
    // file (AES-CBC, PBKDF2): no package dependency on a TLS library. totp-enroll only; the
    // module, pam-totpd and the library targets never load it.
    .target(name: "CLibCrypto", path: "Sources/CLibCrypto", linkerSettings: [.linkedLibrary("dl"), .linkedLibrary("pthread")]),
    // pam-totpd's sender start (issue 19, MFADaemon's Delivery.swift): fork and the child's steps up to execve, in C,
    // since a child of a multi-threaded process may only make async-signal-safe calls.
    .target(name: "CSpawn", path: "Sources/CSpawn"),
    // Never built into the module, one job each: the import formats totp-enroll reads (PSKC
    // with its XML reader, Google Authenticator files, otpauth:// URIs); reading PAM stacks
    // (totp-enroll check and policy); pam-totpd's rules (DaemonService over any store, the
    // limits that share it among callers, starting senders, the passwd reader).
    .target(name: "MFAImport", dependencies: library + ["CLibc"], swiftSettings: programSwift),
    .target(name: "MFAPamStacks", dependencies: ["MFASystem", "MFAPolicy"], swiftSettings: programSwift),
    .target(name: "MFADaemon", dependencies: library + ["MFAWire", "CLibc", "CSpawn"], swiftSettings: programSwift),
    // totp-enroll's and pam-totpd's command lines and --help (a general parser pulled
    // Foundation into both programs: docs/ARCHITECTURE.md, section 3).
    .target(name: "MFACommandLine", dependencies: ["CLibc"], swiftSettings: programSwift),
    // The fleet schema's SQL files, embedded at build time with C23 #embed (no committed copy).
    .target(name: "CFleetSQL", path: "Sources/CFleetSQL", cSettings: [.unsafeFlags(["-std=c23"])]),
    .target(name: "FleetStore", dependencies: library + ["MFAWire", "CLibPQ", "CFleetSQL"],
            swiftSettings: programSwift + [.swiftLanguageMode(.v5)]),
    // The daemon for callers without root (docs/ARCHITECTURE.md, section 5.2): a poll(2) loop
    // and worker threads, syslog; every rule is MFADaemon's.
    .executableTarget(
        name: "pam-totpd",
        dependencies: library + [
            "MFAWire", "MFADaemon", "MFACommandLine", "CLibc", "FleetStore",
        ],
        swiftSettings: programSwift + [.swiftLanguageMode(.v5)],
        linkerSettings: programLinker),
    // Set-uid root (docs/ARCHITECTURE.md, section 4.3): enrolment and day-2 changes.
    .executableTarget(
        name: "totp-enroll",
        dependencies: library + [
            "MFAWire", "MFAImport", "MFAPamStacks", "MFACommandLine", "CLibc", "CPAM", "CQREncode", "CLibCrypto",
        ],
        swiftSettings: programSwift,
        // libpam (re-authentication) and libqrencode: the module maps' autolinking is not
        // honoured by Embedded Swift, so both are named here.
        linkerSettings: programLinker + [.linkedLibrary("pam"), .linkedLibrary("qrencode")]),
]
var products: [Product] = [
    .library(name: "pam_totp", type: .dynamic, targets: ["PamTOTP"]),
    .executable(name: "pam-totpd", targets: ["pam-totpd"]),
    .executable(name: "totp-enroll", targets: ["totp-enroll"]),
]
var dependencies: [Package.Dependency] = []

if !embedded {
    targets += [
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        // Test-only: rewrites a record and a state file in a loop, for the SIGKILL crash test.
        .executableTarget(name: "store-writer", dependencies: library, path: "Tests/StoreWriter"),
        // CLibCrypto: the PSKC tests decrypt the RFC 6030 figures with the AES-CBC totp-enroll uses.
        .testTarget(name: "LibraryTests", dependencies: library + ["MFAWire", "MFAImport", "MFAPamStacks", "MFADaemon", "MFACommandLine", "TestSupport", "FleetStore", "CLibCrypto"]),
        .testTarget(name: "PamTOTPTests", dependencies: library + ["MFAWire", "MFAImport", "MFAPamStacks", "MFADaemon", "CPAM", "TestSupport", "FleetStore"]),
    ]
}

let package = Package(
    name: "pam_totp",
    products: products,
    dependencies: dependencies,
    targets: targets
)
