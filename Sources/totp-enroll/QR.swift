import MFACommandLine
import CQREncode
import CLibc

/// A QR code as a square of modules (true = dark), made by libqrencode.
struct QRMatrix {
    let width: Int
    let dark: [Bool]

    init(_ text: String) throws(CommandError) {
        // Level M, byte mode, case-sensitive: what Google's Key URI examples use.
        guard let qr = QRcode_encodeString(text, 0, QR_ECLEVEL_M, QR_MODE_8, 1) else {
            throw CLIError("libqrencode could not encode the URI (errno \(clibc_errno()))")
        }
        defer { QRcode_free(qr) }
        let w = Int(qr.pointee.width)
        width = w
        let data = UnsafeBufferPointer(start: qr.pointee.data, count: w * w)
        dark = data.map { $0 & 1 == 1 }
    }

    func isDark(_ x: Int, _ y: Int) -> Bool {
        x >= 0 && y >= 0 && x < width && y < width && dark[y * width + x]
    }
}

enum QRStyle: String, CaseIterable {
    case utf8, ansi, none
}

/// Renders with Unicode half blocks, two module rows per text line, with a 4-module quiet
/// zone, in explicit colours: dark modules are drawn in black on a white background
/// (`ESC[30;47m`), so the code reads the same on light and dark terminals (a plain half-block
/// drawing is inverted on one of them, and most scanners do not read an inverted code). Each
/// line ends with a reset, so no colour bleeds into what follows.
func renderUTF8(_ qr: QRMatrix) -> String {
    let quiet = 4, colours = "\u{1B}[30;47m", reset = "\u{1B}[0m"
    var out = ""
    var y = -quiet
    while y < qr.width + quiet {
        out += colours
        for x in -quiet..<(qr.width + quiet) {
            switch (qr.isDark(x, y), qr.isDark(x, y + 1)) {
            case (true, true): out += "\u{2588}"
            case (true, false): out += "\u{2580}"
            case (false, true): out += "\u{2584}"
            case (false, false): out += " "
            }
        }
        out += reset + "\n"
        y += 2
    }
    return out
}

/// Renders with ANSI background colours, two spaces per module (about square in a terminal
/// cell): black modules on a white field with a 4-module quiet zone, like `qrencode -t ANSI`.
/// The colours are explicit, so it reads the same on light and dark terminals. Each line ends
/// with a reset, so no colour bleeds into what follows.
func renderANSI(_ qr: QRMatrix) -> String {
    let quiet = 4, black = "\u{1B}[40m", white = "\u{1B}[47m", reset = "\u{1B}[0m"
    var out = ""
    for y in -quiet..<(qr.width + quiet) {
        var current: Bool? = nil
        for x in -quiet..<(qr.width + quiet) {
            let dark = qr.isDark(x, y)
            if dark != current { out += dark ? black : white; current = dark }
            out += "  "
        }
        out += reset + "\n"
    }
    return out
}
