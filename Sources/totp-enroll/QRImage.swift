import MFACommandLine
import CLibc
import MFASystem

// The QR code as image files (`--qr-svg`, `--qr-png`), made here without a new dependency, and
// the one way they reach the disk: `writeFileAsCaller`.

/// Modules of light margin around the code in every rendering (ISO/IEC 18004 asks for 4).
let qrQuietZone = 4

// MARK: - SVG

/// A minimal SVG: a white square and one path of dark rectangles, one per horizontal run of
/// modules, in module units (the viewBox), so it scales without blur. `pixelsPerModule` only
/// sets the default display size. `stroke="none"` is SVG's default, but ImageMagick's own
/// renderer (what zbarimg uses) strokes without it, merging the modules.
func svg(_ qr: QRMatrix, pixelsPerModule: Int = 8) -> String {
    let side = qr.width + 2 * qrQuietZone
    var d = ""
    for y in 0..<qr.width {
        var x = 0
        while x < qr.width {
            guard qr.isDark(x, y) else { x += 1; continue }
            var run = 1
            while qr.isDark(x + run, y) { run += 1 }
            d += "M\(x + qrQuietZone) \(y + qrQuietZone)h\(run)v1h-\(run)z"
            x += run
        }
    }
    let size = side * pixelsPerModule
    return """
        <?xml version="1.0" encoding="UTF-8"?>
        <svg xmlns="http://www.w3.org/2000/svg" width="\(size)" height="\(size)" \
        viewBox="0 0 \(side) \(side)" shape-rendering="crispEdges" stroke="none">
        <rect width="\(side)" height="\(side)" fill="#fff"/>
        <path fill="#000" d="\(d)"/>
        </svg>

        """
}

// MARK: - PNG (RFC 2083 / PNG 1.2, RFC 1950 zlib, RFC 1951 stored deflate blocks)

/// CRC-32 as PNG and zlib define it (reflected polynomial 0xEDB88320), bit by bit: the
/// images are small, a table would not pay.
func crc32(_ bytes: [UInt8]) -> UInt32 {
    var crc: UInt32 = 0xFFFF_FFFF
    for byte in bytes {
        crc ^= UInt32(byte)
        for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
    }
    return ~crc
}

/// Adler-32, the checksum that ends a zlib stream.
func adler32(_ bytes: [UInt8]) -> UInt32 {
    var a: UInt32 = 1, b: UInt32 = 0
    for byte in bytes {
        a = (a + UInt32(byte)) % 65521
        b = (b + a) % 65521
    }
    return b << 16 | a
}

func bigEndian(_ value: UInt32) -> [UInt8] {
    [UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8),
     UInt8(truncatingIfNeeded: value)]
}

/// A zlib stream holding `data` in stored (uncompressed) deflate blocks of at most 65535 bytes.
func zlibStored(_ data: [UInt8]) -> [UInt8] {
    var out: [UInt8] = [0x78, 0x01]  // deflate, 32 KiB window, no dictionary; 0x7801 % 31 == 0
    var offset = 0
    repeat {
        let length = min(65535, data.count - offset)
        let isLast = offset + length == data.count
        // BFINAL, then BTYPE 00 (stored); the rest of the byte pads to the byte boundary.
        out.append(isLast ? 1 : 0)
        let complement = 0xFFFF ^ length
        out += [UInt8(length & 0xFF), UInt8(length >> 8), UInt8(complement & 0xFF), UInt8(complement >> 8)]
        out += data[offset..<(offset + length)]
        offset += length
    } while offset < data.count
    return out + bigEndian(adler32(data))
}

/// One PNG chunk: length, type, data, CRC-32 of type and data.
func pngChunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
    let typeAndData = Array(type.utf8) + data
    return bigEndian(UInt32(data.count)) + typeAndData + bigEndian(crc32(typeAndData))
}

/// A 1-bit greyscale PNG (0 black, 1 white): each module `scale`×`scale` pixels, with the
/// quiet zone. Every row has filter type 0 (none).
func png(matrix qr: QRMatrix, scale: Int = 8) -> [UInt8] {
    let side = (qr.width + 2 * qrQuietZone) * scale
    let rowBytes = (side + 7) / 8
    var raw: [UInt8] = []
    raw.reserveCapacity((1 + rowBytes) * side)
    for py in 0..<side {
        var row = [UInt8](repeating: 0xFF, count: rowBytes)
        for px in 0..<side where qr.isDark(px / scale - qrQuietZone, py / scale - qrQuietZone) {
            row[px / 8] &= ~(0x80 >> UInt8(px % 8))
        }
        raw.append(0)
        raw += row
    }
    let header = bigEndian(UInt32(side)) + bigEndian(UInt32(side))
        + [1, 0, 0, 0, 0]  // bit depth 1, greyscale, deflate, adaptive filtering, no interlace
    return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        + pngChunk("IHDR", header) + pngChunk("IDAT", zlibStored(raw)) + pngChunk("IEND", [])
}

// MARK: - Writing as the caller

/// What a writer child exits with besides 0 and an errno (which all fit in 1...254 on Linux).
private let privilegeDropFailed: Int32 = 255

/// Creates `path` (never an existing file, never through a symlink) holding `bytes`, with the
/// rights of the user who ran the tool. totp-enroll is set-uid root (docs/ARCHITECTURE.md, section 4.3): when the
/// effective ids differ from the real ones, a child drops to the real ids for good and does the
/// write, so the kernel checks the path with the caller's rights, not root's. The file is 0600:
/// the picture holds the secret.
func writeFileAsCaller(_ path: String, _ bytes: [UInt8]) throws(CommandError) {
    try asCaller(path) { createNewFile($0, bytes) }
}

/// Checks, before the password and a code are asked for, that `path` can be created as the
/// caller: creates it (empty, as the caller) and removes it again.
func probeNewFileAsCaller(_ path: String) throws(CommandError) {
    try asCaller(path) { cPath in
        let r = createNewFile(cPath, [])
        if r == 0 { _ = cPath.withUnsafeBufferPointer { unlink($0.baseAddress!) } }
        return r
    }
}

/// Runs `body` on the path with the caller's rights (a child when set-uid) and turns its
/// errno into one clear line.
private func asCaller(_ path: String, _ body: ([CChar]) -> Int32) throws(CommandError) {
    let cPath = Array(path.utf8CString)  // prepared before fork: the child only makes syscalls
    let result: Int32
    if geteuid() != getuid() || getegid() != getgid() {
        result = try inChildAsCaller(writing: path) { body(cPath) }
    } else {
        result = body(cPath)
    }
    switch result {
    case 0: return
    case EEXIST: throw CLIError("cannot write \(shown(path)): it already exists; remove it or choose another file")
    case privilegeDropFailed: throw CLIError("cannot write \(shown(path)): could not drop privileges to the calling user")
    default: throw CLIError("cannot write \(shown(path)): " + Errno(result).text.string)
    }
}

/// Runs `body` in a child that has set its real, effective and saved ids to the caller's real
/// uid and gid (no supplementary groups) and checked it cannot get the old ones back; returns
/// what `body` returned (0 or an errno), or `privilegeDropFailed`.
private func inChildAsCaller(writing path: String, _ body: () -> Int32) throws(CommandError) -> Int32 {
    let pid = fork()
    guard pid >= 0 else { throw CLIError("cannot write \(shown(path)): fork failed: " + Errno.current.text.string) }
    if pid == 0 {
        guard Privilege.dropToCaller() else { _exit(privilegeDropFailed) }
        _exit(body())
    }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
        guard clibc_errno() == EINTR else { throw CLIError("cannot write \(shown(path)): waitpid failed: " + Errno.current.text.string) }
    }
    let signal = status & 0x7F
    guard signal == 0 else { throw CLIError("cannot write \(shown(path)): the writer process was killed by signal \(signal)") }
    return (status >> 8) & 0xFF
}

/// open(O_CREAT|O_EXCL|O_NOFOLLOW), write all, close: 0, or the errno of the step that failed
/// (a partly written file is removed). Only syscalls, so it is safe in a forked child.
private func createNewFile(_ path: [CChar], _ bytes: [UInt8]) -> Int32 {
    let fd = path.withUnsafeBufferPointer {
        clibc_open($0.baseAddress!, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
    }
    guard fd >= 0 else { return clibc_errno() }
    var failure: Int32 = 0
    var offset = 0
    while offset < bytes.count {
        let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if n > 0 { offset += n; continue }
        if n < 0 && clibc_errno() == EINTR { continue }
        failure = n < 0 ? clibc_errno() : EIO
        break
    }
    if close(fd) != 0 && clibc_errno() != EINTR && failure == 0 { failure = clibc_errno() }
    if failure != 0 { _ = path.withUnsafeBufferPointer { unlink($0.baseAddress!) } }
    return failure
}
