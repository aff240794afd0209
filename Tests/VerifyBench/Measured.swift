// The two functions callgrind measures (see main.swift's header) and the work they share.
import CLibc
import MFACrypto
import MFASystem

let windowIntervals = 5

/// The work of `match`, shared by the warm-up and the measured call.
@inline(never)
func runMatch(_ verifier: TOTPVerifier, _ key: HMACKey, _ answer: [UInt8], _ now: Int64) -> UInt64? {
    do {
        let m = try verifier.match(answer: answer, key: key, parameters: .default, at: now, usedUpTo: nil)
        return m.step
    } catch {
        return nil
    }
}

/// The work of `hmacs`: every HMAC that `match` computes for the window around `now`.
@inline(never)
func runHMACs(_ key: HMACKey, _ first: UInt64, _ last: UInt64) -> UInt8 {
    var acc: UInt8 = 0
    var step = first
    while step <= last {
        let mac = key.authenticate(counter: step)
        acc ^= mac[mac.count - 1]  // keep every result live
        step += 1
    }
    return acc
}

@_silgen_name("pam_totp_bench_match")
@inline(never)
func measuredMatch(_ verifier: TOTPVerifier, _ key: HMACKey, _ answer: [UInt8], _ now: Int64) -> UInt64? {
    runMatch(verifier, key, answer, now)
}

@_silgen_name("pam_totp_bench_hmacs")
@inline(never)
func measuredHMACs(_ key: HMACKey, _ first: UInt64, _ last: UInt64) -> UInt8 {
    runHMACs(key, first, last)
}

func fail(_ text: String) -> Never {
    var line = Array("verify-bench: error: \(text)\n".utf8)
    line.withUnsafeMutableBytes { _ = write(2, $0.baseAddress, $0.count) }
    exit(1)
}
