// verify-bench match|hmacs BASE32_SECRET UNIX_TIME
//
// Bench-only (scripts/bench.sh, `make bench`; never installed): the cost of the in-process
// verification, measured by callgrind with `--toggle-collect=` on one of the two functions below.
// Their symbol names are fixed with @_silgen_name (plain C identifiers, no Swift mangling), so a
// rename anywhere in MFACore cannot make the measurement silently read zero: if a name here
// stopped matching, callgrind would collect nothing and bench.sh fails on a zero count.
//
//   match  TOTPVerifier.match at the default window (adjacent_intervals=5: 11 steps, constant
//          time), answered with the code of UNIX_TIME's step, as a login does
//   hmacs  the 11 HMACs that match has to compute (HMACKey.authenticate(counter:), same key,
//          same steps), and nothing else
//
// Each measured function runs once, after one unmeasured warm-up call of the same work (so lazy
// PLT binding and first-use costs stay outside). Exit status 0 only if the verification found the
// expected step, non-zero with one line on stderr otherwise, so a broken path is never measured.
//
// Built like the shipped module: in Embedded Swift when PAM_TOTP_EMBEDDED=1 (the Makefile builds
// it in .build-embedded next to pam_totp.so), so the code measured is the code that ships.
import CLibc
import MFACommandLine
import MFACrypto
import MFASystem

func run() -> Int32 {
    let args = processArguments()  // MFACommandLine: Embedded Swift has no CommandLine
    func argument(_ i: Int) -> [UInt8] {
        guard i < args.count else { fail("usage: verify-bench match|hmacs BASE32_SECRET UNIX_TIME") }
        return args[i]
    }
    let mode = argument(1)
    let secret: [UInt8]
    do { secret = try Base32.decode(argument(2)) } catch { fail("the secret is not Base32") }
    var now: Int64 = 0
    for c in argument(3) {
        guard c >= 0x30 && c <= 0x39, now < Int64.max / 10 - 9 else { fail("UNIX_TIME must be decimal seconds") }
        now = now * 10 + Int64(c - 0x30)
    }
    let verifier: TOTPVerifier
    do { verifier = try TOTPVerifier(adjacentIntervals: windowIntervals) } catch { fail("no verifier") }
    let key = HMACKey(algorithm: .sha1, key: secret)
    let nowStep = UInt64(now) / OTPParameters.default.period
    guard nowStep >= UInt64(windowIntervals) else { fail("UNIX_TIME too small") }
    let answer = HOTP.code(key: key, counter: nowStep, digits: OTPParameters.default.digits)
    let first = nowStep - UInt64(windowIntervals)
    let last = nowStep + UInt64(windowIntervals)

    switch mode {
    case Array("match".utf8):
        // The lowest matching step is expected; a chance match of an earlier step in the window
        // (one in 10^6 per step) is accepted as well, it costs the same.
        guard let warm = runMatch(verifier, key, answer, now), warm <= nowStep, warm >= first else {
            fail("TOTPVerifier.match did not accept the current code")
        }
        guard measuredMatch(verifier, key, answer, now) == warm else {
            fail("TOTPVerifier.match gave a different answer the second time")
        }
    case Array("hmacs".utf8):
        let warm = runHMACs(key, first, last)
        guard measuredHMACs(key, first, last) == warm else { fail("HMACs differ between two runs") }
    default:
        fail("usage: verify-bench match|hmacs BASE32_SECRET UNIX_TIME")
    }
    return 0
}

exit(run())
