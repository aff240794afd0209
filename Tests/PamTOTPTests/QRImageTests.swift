import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// totp-enroll's `--qr ansi`, `--qr-svg` and `--qr-png`: each rendering decodes (zbarimg) to the
/// printed URI for every algorithm × digits × period, the PNG is valid down to its checksums,
/// and image files are only ever created new, with the caller's rights.
final class QRImageTests: XCTestCase {
    var root: URL!
    var store: URL!

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "--user and --store are root-only")
        root = try makeTemporaryDirectory("pam_totp_qr")
        store = root.appendingPathComponent("store")
    }

    override func tearDown() { if let root { removeTemporaryDirectory(root) } }

    /// Runs totp-enroll for nobody on the test store, after `prefix` (e.g. setpriv ...).
    func enroll(_ extra: [String], prefix: [String] = []) throws -> CommandResult {
        try runCommand(prefix + [enrollURL.path, "--store", store.path, "--user", "nobody"] + extra)
    }

    func file(_ name: String) -> String { root.appendingPathComponent(name).path }

    /// The `URI:` line of a run without a code: it prints everything, then fails saving nothing.
    func printedURI(_ r: CommandResult, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        XCTAssertNotEqual(r.status, 0, "no code: nothing is saved", file: file, line: line)
        XCTAssertTrue(r.stderr.contains("nothing was saved"), r.stderr, file: file, line: line)
        let uriLine = r.stdout.split(separator: "\n").first { $0.hasPrefix("URI:  ") }
        return String(try XCTUnwrap(uriLine, r.stdout, file: file, line: line).dropFirst(6))
    }

    func zbar(_ path: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let r = try runCommand(["zbarimg", "--raw", "-q", path])
        XCTAssertEqual(r.status, 0, "zbarimg \(path): \(r.stderr)", file: file, line: line)
        return r.stdout.trimmingCharacters(in: .newlines)
    }

    /// Writes modules (true = dark) as a binary PGM, `scale` pixels per module, for zbarimg.
    func writePGM(_ rows: [[Bool]], scale: Int = 4) throws -> String {
        let side = rows.count * scale
        var data = Data("P5\n\(side) \(side)\n255\n".utf8)
        for row in rows {
            let pixels = row.flatMap { Array(repeating: UInt8($0 ? 0 : 255), count: scale) }
            for _ in 0..<scale { data.append(contentsOf: pixels) }
        }
        let url = root.appendingPathComponent("decoded-\(UUID().uuidString).pgm")
        try data.write(to: url)
        return url.path
    }

    // MARK: - PNG check, independent of our encoder (Python's zlib)

    /// For each file: checks signature, chunk order and CRCs, IHDR, that IDAT is a zlib stream
    /// of stored blocks (LEN/NLEN, at most 65535 bytes each) with the right Adler-32 that zlib
    /// also inflates, a filter byte 0 on every row, and that every 8×8 cell is one colour. Prints
    /// "PNG WIDTH HEIGHT BLOCKS", then the module grid (1 = dark). One process for many files:
    /// Python starts slowly.
    static let pngCheck = #"""
        import struct, sys, zlib

        def check(path):
            data = open(path, "rb").read()
            assert data[:8] == b"\x89PNG\r\n\x1a\n", "signature"
            at, chunks = 8, []
            while at < len(data):
                n, kind = struct.unpack(">I4s", data[at:at + 8])
                body, crc = data[at + 8:at + 8 + n], data[at + 8 + n:at + 12 + n]
                assert len(body) == n and crc == struct.pack(">I", zlib.crc32(kind + body)), "CRC of %r" % kind
                chunks.append((kind, body))
                at += 12 + n
            assert [k for k, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"], [k for k, _ in chunks]
            w, h, depth, colour, method, filtering, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
            assert (colour, method, filtering, interlace) == (0, 0, 0, 0) and depth in (1, 8), "IHDR"
            z = chunks[1][1]
            assert z[0] == 0x78 and (z[0] * 256 + z[1]) % 31 == 0, "zlib header"
            i, raw, blocks = 2, b"", 0
            while True:
                head = z[i]
                assert head & 6 == 0, "not a stored block"
                n, nlen = struct.unpack("<HH", z[i + 1:i + 5])
                assert n ^ nlen == 0xFFFF, "LEN/NLEN"
                raw += z[i + 5:i + 5 + n]
                i, blocks = i + 5 + n, blocks + 1
                if head & 1:
                    break
            assert z[i:] == struct.pack(">I", zlib.adler32(raw)), "Adler-32"
            assert zlib.decompress(z) == raw
            stride = (w * depth + 7) // 8
            assert len(raw) == h * (stride + 1), "IDAT size"
            rows = []
            for y in range(h):
                at = y * (stride + 1)
                assert raw[at] == 0, "filter byte"
                line = raw[at + 1:at + 1 + stride]
                if depth == 8:
                    rows.append([int(b < 128) for b in line])
                else:
                    rows.append([1 - ((b >> (7 - k)) & 1) for b in line for k in range(8)][:w])
            for y in range(h):
                assert rows[y] == rows[y // 8 * 8], "row %d differs within its module" % y
                assert all(rows[y][x] == rows[y][x // 8 * 8] for x in range(w)), "row %d: a module is not 8 pixels" % y
            print("PNG", w, h, blocks)
            for y in range(0, h, 8):
                print("".join(str(rows[y][x]) for x in range(0, w, 8)))

        for path in sys.argv[1:]:
            try:
                check(path)
            except Exception as e:
                sys.exit("%s: %s" % (path, e or type(e).__name__))
        """#

    struct PNGInfo { var width: Int; var height: Int; var blocks: Int; var modules: [[Bool]] }

    /// Checks PNG files (see `pngCheck`), in order.
    func checkPNGs(_ paths: [String], file: StaticString = #filePath, line: UInt = #line) throws -> [PNGInfo] {
        let r = try runCommand(["python3", "-I", "-c", Self.pngCheck] + paths)
        XCTAssertEqual(r.status, 0, "invalid PNG: \(r.stderr)", file: file, line: line)
        var infos: [PNGInfo] = []
        for text in r.stdout.split(separator: "\n") {
            if text.hasPrefix("PNG ") {
                let n = text.split(separator: " ").dropFirst().compactMap { Int($0) }
                infos.append(PNGInfo(width: n[0], height: n[1], blocks: n[2], modules: []))
            } else if !infos.isEmpty {
                infos[infos.count - 1].modules.append(text.map { $0 == "1" })
            }
        }
        XCTAssertEqual(infos.count, paths.count, r.stdout, file: file, line: line)
        return infos
    }

    // MARK: - SVG and ANSI back to modules

    /// Reads the SVG's single path of `Mx yhNv1h-Nz` runs back into modules (true = dark),
    /// checking the frame: viewBox, crispEdges, the white background.
    func svgModules(_ path: String, file: StaticString = #filePath, line: UInt = #line) throws -> [[Bool]] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        XCTAssertTrue(text.hasPrefix("<?xml"), file: file, line: line)
        XCTAssertTrue(text.contains("shape-rendering=\"crispEdges\""), file: file, line: line)
        XCTAssertEqual(text.components(separatedBy: "<path").count, 2, "one path", file: file, line: line)
        let side = try XCTUnwrap(capture(#"viewBox="0 0 (\d+) \1""#, in: text).flatMap { Int($0[0]) },
                                 "square viewBox", file: file, line: line)
        XCTAssertNotNil(capture(##"<rect width="\##(side)" height="\##(side)" fill="#fff"/>"##, in: text), "background", file: file, line: line)
        let d = try XCTUnwrap(capture(##"<path fill="#000" d="([^"]*)"/>"##, in: text)?[0], file: file, line: line)
        var rows = Array(repeating: Array(repeating: false, count: side), count: side)
        let run = try NSRegularExpression(pattern: #"M(\d+) (\d+)h(\d+)v1h-\3z"#)
        var covered = 0
        for m in run.matches(in: d, range: NSRange(d.startIndex..., in: d)) {
            let n = (1...3).map { Int(d[Range(m.range(at: $0), in: d)!])! }
            for x in n[0]..<(n[0] + n[2]) { rows[n[1]][x] = true }
            covered += m.range.length
        }
        XCTAssertEqual(covered, (d as NSString).length, "the path is only unit-high runs", file: file, line: line)
        return rows
    }

    func capture(_ pattern: String, in text: String) -> [String]? {
        guard let re = try? NSRegularExpression(pattern: pattern),
              let m = re.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) else { return nil }
        return (1..<m.numberOfRanges).map { String(text[Range(m.range(at: $0), in: text)!]) }
    }

    /// Reads an `--qr ansi` rendering back into modules: SGR 40 = dark, 47 = light, two spaces
    /// per module, every line reset at its end.
    func ansiModules(_ stdout: String, file: StaticString = #filePath, line: UInt = #line) -> [[Bool]] {
        var rows: [[Bool]] = []
        for text in stdout.split(separator: "\n") where text.contains("\u{1B}") {
            XCTAssertTrue(text.hasSuffix("\u{1B}[0m"), "line ends with a reset", file: file, line: line)
            var row: [Bool] = [], dark: Bool? = nil, spaces = 0
            var scalars = text.unicodeScalars.makeIterator()
            while let c = scalars.next() {
                if c == "\u{1B}" {
                    var sgr = ""
                    while let p = scalars.next(), p != "m" { sgr.unicodeScalars.append(p) }
                    dark = sgr == "[40" ? true : sgr == "[47" ? false : nil
                    XCTAssertTrue(sgr == "[40" || sgr == "[47" || sgr == "[0", "SGR \(sgr)", file: file, line: line)
                } else {
                    XCTAssertEqual(c, " ", file: file, line: line)
                    XCTAssertNotNil(dark, "a module without a colour", file: file, line: line)
                    spaces += 1
                    if spaces % 2 == 0 { row.append(dark ?? false) }
                }
            }
            XCTAssertEqual(spaces % 2, 0, "two spaces per module", file: file, line: line)
            rows.append(row)
        }
        return rows
    }

    func assertQuietZone(_ rows: [[Bool]], file: StaticString = #filePath, line: UInt = #line) {
        let side = rows.count
        XCTAssertTrue(rows.allSatisfy { $0.count == side }, "square", file: file, line: line)
        XCTAssertEqual((side - 8 - 21) % 4, 0, "a QR width (21 + 4v) plus the quiet zone", file: file, line: line)
        for (y, row) in rows.enumerated() {
            for (x, dark) in row.enumerated() where dark {
                XCTAssertTrue((4..<(side - 4)).contains(x) && (4..<(side - 4)).contains(y),
                              "dark module in the quiet zone at \(x),\(y)", file: file, line: line)
            }
        }
    }

    /// Runs `command` with `flag` + T appended for T = 59, 1111111109, 2000000000, in one shell
    /// (process start-up dominates this test): one output line per time.
    func atThreeTimes(_ flag: String, _ command: [String]) throws -> CommandResult {
        let script = #"f=$1; shift; for t in 59 1111111109 2000000000; do "$@" "$f$t" || exit; done"#
        return try runCommand(["sh", "-c", script, "sh", flag] + command)
    }

    // MARK: - Tests

    func testEveryParameterCombinationDecodesFromPNGAndSVGAndMatchesOathtool() throws {
        struct Run { var algorithm: String; var digits: Int; var period: Int; var uri: String; var png: String; var svg: String }
        var runs: [Run] = []
        for algorithm in ["sha1", "sha256", "sha512"] {
            for digits in [6, 8] {
                for period in [30, 60] {
                    let name = "\(algorithm)-\(digits)-\(period)"
                    let png = file(name + ".png"), svg = file(name + ".svg")
                    let r = try enroll(["--algorithm", algorithm, "--digits", "\(digits)", "--period", "\(period)",
                                        "--qr", "none", "--qr-svg", svg, "--qr-png", png])
                    XCTAssertFalse(r.stdout.contains("\u{2588}") || r.stdout.contains("\u{1B}"), "--qr none prints no QR code")
                    runs.append(Run(algorithm: algorithm, digits: digits, period: period, uri: try printedURI(r), png: png, svg: svg))
                }
            }
        }
        XCTAssertNil(try Store(path: Array(store.path.utf8)).read(user: Array("nobody".utf8)), "nothing saved without a code")
        let infos = try checkPNGs(runs.map(\.png))
        var svgDirectlyDecoded = 0
        for (run, info) in zip(runs, infos) {
            let what = "\(run.algorithm)/\(run.digits)/\(run.period)"
            // PNG: valid (checked above), the expected size, decodes to the printed URI.
            XCTAssertEqual(info.width, info.height)
            XCTAssertEqual(info.modules.count * 8, info.width, "8 pixels per module")
            assertQuietZone(info.modules)
            XCTAssertEqual(try zbar(run.png), run.uri, what)

            // SVG: the same modules as the PNG; decodes through our own rasterisation and,
            // where ImageMagick has its SVG coder, directly.
            let modules = try svgModules(run.svg)
            XCTAssertEqual(modules, info.modules, "SVG and PNG show the same code (\(what))")
            XCTAssertEqual(try zbar(try writePGM(modules)), run.uri, what)
            let direct = try runCommand(["zbarimg", "--raw", "-q", run.svg])
            if direct.status == 0 || !direct.stderr.contains("delegate") {
                XCTAssertEqual(direct.stdout.trimmingCharacters(in: .newlines), run.uri, "zbarimg \(run.svg): \(direct.stderr)")
                svgDirectlyDecoded += 1
            }

            // The URI carries the parameters, and its secret gives oathtool's codes.
            let parsed = try OTPAuthURI(parsing: Array(run.uri.utf8))
            XCTAssertEqual(parsed.parameters.algorithm, HashAlgorithm(name: Array(run.algorithm.utf8)), what)
            XCTAssertEqual(parsed.parameters.digits, run.digits, what)
            XCTAssertEqual(parsed.parameters.period, UInt64(run.period), what)
            let secret = Base32.encodeString(parsed.secret)
            let ours = try atThreeTimes("--time=", [enrollURL.path, "code", "--secret", secret, "--algorithm", run.algorithm,
                                                    "--digits", "\(run.digits)", "--period", "\(run.period)"])
            let theirs = try atThreeTimes("--now=@", ["oathtool", "--totp=\(run.algorithm.uppercased())", "--digits=\(run.digits)",
                                                      "--time-step-size=\(run.period)s", "-b", secret])
            XCTAssertEqual(ours.status, 0, ours.stderr)
            XCTAssertEqual(theirs.status, 0, theirs.stderr)
            XCTAssertEqual(ours.stdout, theirs.stdout, what)
            XCTAssertEqual(ours.stdout.split(separator: "\n").map(\.count), Array(repeating: run.digits, count: 3), what)
        }
        if svgDirectlyDecoded == 0 { print("note: zbarimg cannot read SVG here (no ImageMagick SVG coder); decoded via our rasterisation only") }
    }

    func testANSIRenderingDecodes() throws {
        let r = try enroll(["--qr", "ansi", "--issuer", "Example Co"])
        let uri = try printedURI(r)
        let modules = ansiModules(r.stdout)
        XCTAssertGreaterThan(modules.count, 21 + 8)
        assertQuietZone(modules)
        XCTAssertEqual(try zbar(try writePGM(modules)), uri)
        XCTAssertFalse(r.stdout.contains("\u{2588}"), "no half blocks in ansi mode")
    }

    func testLargeCodeSpansSeveralStoredBlocks() throws {
        // A long issuer and a 1000-bit secret: a version ~20 code, over 65535 bytes of pixels.
        let secret = String(repeating: "JBSWY3DPEHPK3PXP", count: 12) + "JBSWY3DP"
        let png = file("big.png"), svg = file("big.svg")
        let r = try enroll(["--secret", secret, "--issuer", String(repeating: "Example ", count: 25),
                            "--qr", "none", "--qr-png", png, "--qr-svg", svg])
        let uri = try printedURI(r)
        let info = try XCTUnwrap(try checkPNGs([png]).first)
        XCTAssertGreaterThanOrEqual(info.blocks, 2, "more than one stored block")
        XCTAssertEqual(try zbar(png), uri)
        XCTAssertEqual(try svgModules(svg), info.modules)
    }

    func testExistingFileIsRefusedAndKept() throws {
        let existing = file("existing.png")
        try Data("keep me\n".utf8).write(to: URL(fileURLWithPath: existing))
        let r = try enroll(["--qr", "none", "--qr-png", existing])
        XCTAssertNotEqual(r.status, 0)
        XCTAssertEqual(r.stderr.split(separator: "\n").count, 1, r.stderr)
        XCTAssertTrue(r.stderr.contains("cannot write \(existing): it already exists"), r.stderr)
        XCTAssertEqual(try String(contentsOfFile: existing, encoding: .utf8), "keep me\n")
        XCTAssertFalse(r.stdout.contains("URI:"), "stops before the key is shown")

        // A dangling symlink is not followed: its target is not created.
        let target = file("target.svg"), link = file("link.svg")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        let s = try enroll(["--qr", "none", "--qr-svg", link])
        XCTAssertNotEqual(s.status, 0)
        XCTAssertTrue(s.stderr.contains("already exists"), s.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target))
        XCTAssertNil(try Store(path: Array(store.path.utf8)).read(user: Array("nobody".utf8)))
    }

    /// A directory owned by nobody, 0755: only nobody (or a root with CAP_DAC_OVERRIDE) may
    /// create files in it.
    func nobodysDirectory() throws -> String {
        let dir = file("nobodys")
        XCTAssertEqual(mkdir(dir, 0o755), 0)
        XCTAssertEqual(chown(dir, 65534, 65534), 0)
        return dir
    }

    func testUnwritablePathFailsCleanly() throws {
        let dir = try nobodysDirectory()
        // Root without capabilities is an ordinary user to the file system: the direct write
        // (real ids = effective ids), then the forked one (the real gid differs, as when
        // set-gid), both get EACCES.
        for prefix in [["setpriv", "--bounding-set=-all"], ["setpriv", "--rgid=65534", "--keep-groups", "--bounding-set=-all"]] {
            let png = dir + "/qr.png"
            let r = try enroll(["--qr", "none", "--qr-png", png], prefix: prefix)
            XCTAssertNotEqual(r.status, 0, "\(prefix)")
            XCTAssertEqual(r.stderr.split(separator: "\n").count, 1, r.stderr)
            XCTAssertTrue(r.stderr.contains("cannot write \(png): Permission denied"), "\(prefix): \(r.stderr)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: png))
            XCTAssertFalse(r.stdout.contains("URI:"))
        }
        // A missing directory: one line too.
        let r = try enroll(["--qr", "none", "--qr-svg", file("missing/qr.svg")])
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("cannot write \(file("missing/qr.svg")): No such file or directory"), r.stderr)
    }

    func testPrivilegedRunWritesAsTheRealIDs() throws {
        // Real gid nobody, effective gid root: the file is created by a child running with the
        // real gid (a direct write would make it group root), mode 0600, and still decodes.
        let png = file("as-caller.png")
        let r = try enroll(["--qr", "none", "--qr-png", png], prefix: ["setpriv", "--rgid=65534", "--keep-groups"])
        let uri = try printedURI(r)
        let attributes = try FileManager.default.attributesOfItem(atPath: png)
        XCTAssertEqual((attributes[.groupOwnerAccountID] as? NSNumber)?.intValue, 65534)
        XCTAssertEqual((attributes[.ownerAccountID] as? NSNumber)?.intValue, 0)
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600, "the picture holds the secret")
        XCTAssertEqual(try zbar(png), uri)
        // Without the difference, the same run writes directly, as root.
        let direct = file("direct.png")
        _ = try printedURI(try enroll(["--qr", "none", "--qr-png", direct]))
        XCTAssertEqual((try FileManager.default.attributesOfItem(atPath: direct)[.groupOwnerAccountID] as? NSNumber)?.intValue, 0)
    }
}
