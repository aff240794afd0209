import XCTest
import TestSupport
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

/// The state file parser on the crafted input of the security review (finding 11).
final class StateSlotParsingTests: XCTestCase {
    /// A version-1 slot: the magic line, `seq` lines as filler up to `bodySize` bytes, then
    /// "end " and the SHA-256 of the body in hex, then `trailer`; zeros to the slot's end.
    func version1Slot(bodySize: Int, trailer: [UInt8]) -> [UInt8] {
        var body = Array("pam_totp-state 1\n".utf8)
        while body.count + 6 <= bodySize - 7 { body += Array("seq 1\n".utf8) }
        var last = "seq 1"
        while body.count + last.utf8.count + 1 < bodySize { last += "0" }
        body += Array((last + "\n").utf8)
        XCTAssertEqual(body.count, bodySize)
        var slot = body + Array("end ".utf8) + Array(hex(SHA256.hash(body)).utf8) + trailer
        XCTAssertLessThanOrEqual(slot.count, UserState.slotSize)
        slot += [UInt8](repeating: 0, count: UserState.slotSize - slot.count)
        return slot
    }

    /// Finding 11: the checksum line ends exactly at the slot's end, without its newline.
    /// The old parser found the line (it left room for "end " and 64 digits only), checked the
    /// checksum, then read the newline one byte past the slot and trapped, taking the PAM host
    /// with it. Now the slot is simply invalid, and a file with no valid slot parses to nil.
    func testVersion1SlotEndingAtTheSlotBoundaryIsInvalidNotATrap() {
        let size = UserState.slotSize
        let crafted = version1Slot(bodySize: size - 4 - 64, trailer: [])
        XCTAssertEqual(crafted.count, size)
        XCTAssertNotEqual(crafted[size - 1], 0, "the last hex digit is the slot's last byte")
        let file = crafted + [UInt8](repeating: 0, count: size)
        XCTAssertNil(UserState.parse(slot: crafted[...]))
        XCTAssertNil(UserState.parse(file: file))
        // In the second slot too (a slice that does not start at 0).
        XCTAssertNil(UserState.parse(file: [UInt8](repeating: 0, count: size) + crafted))

        // The control: one byte less of filler and the newline, and the same slot is valid,
        // so the crafted one is refused for its missing newline alone.
        let valid = version1Slot(bodySize: size - 4 - 64 - 1, trailer: [0x0A])
        XCTAssertEqual(valid[size - 1], 0x0A)
        XCTAssertEqual(UserState.parse(file: valid + [UInt8](repeating: 0, count: size))?.sequence, 1_000_000)
    }
}
