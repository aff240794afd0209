import MFASystem

// Only totp-enroll reads XML (import-pskc); the module never does.

/// One element of a small XML document: names by their local part (the prefix before ':' is
/// dropped: PSKC files spell the same namespace with different prefixes, or none), its
/// attributes, its child elements in order, and its character data (text and CDATA sections,
/// concatenated, entities resolved).
public struct XMLElementNode: Sendable, Equatable {
    public var name: [UInt8]
    public var attributes: [(name: [UInt8], value: [UInt8])]
    public var children: [XMLElementNode]
    public var text: [UInt8]

    public init(name: [UInt8], attributes: [(name: [UInt8], value: [UInt8])] = [], children: [XMLElementNode] = [], text: [UInt8] = []) {
        (self.name, self.attributes, self.children, self.text) = (name, attributes, children, text)
    }

    public static func == (a: XMLElementNode, b: XMLElementNode) -> Bool {
        a.name == b.name && a.text == b.text && a.children == b.children
            && a.attributes.count == b.attributes.count
            && zip(a.attributes, b.attributes).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }

    /// The first child element with this local name.
    public func child(_ local: StaticString) -> XMLElementNode? { children.first { equals($0.name, local) } }

    /// The only child element with this local name, nil if none; two or more are refused (a
    /// reader that took the first of two would read a file differently from one that took the
    /// last: a second, unauthenticated copy of a value could be slipped in ahead of it).
    public func single(_ local: StaticString) throws(MFAError) -> XMLElementNode? {
        var found: XMLElementNode? = nil
        for c in children where equals(c.name, local) {
            guard found == nil else {
                throw .invalidParameters("an element has two " + Message(Array(c.name.prefix(64))) + " children (one is allowed)")
            }
            found = c
        }
        return found
    }

    /// `single` down a path of local names.
    public func singlePath(_ names: StaticString...) throws(MFAError) -> XMLElementNode? {
        var at: XMLElementNode? = self
        for n in names { at = try at?.single(n) }
        return at
    }

    /// Every child element with this local name.
    public func children(_ local: StaticString) -> [XMLElementNode] { children.filter { equals($0.name, local) } }

    /// The element at a path of local names below this one (the first match at each level).
    public func path(_ names: StaticString...) -> XMLElementNode? {
        var at: XMLElementNode? = self
        for n in names { at = at?.child(n) }
        return at
    }

    /// An attribute's value by its local name.
    public func attribute(_ local: StaticString) -> [UInt8]? { attributes.first { equals($0.name, local) }?.value }

    /// The text without leading and trailing XML white space.
    public var trimmedText: [UInt8] { XMLReader.trimmed(text) }

    /// Overwrites the text of this element and of every element below it.
    public mutating func erase() {
        wipe(&text)
        for i in children.indices { children[i].erase() }
    }
}

/// A strict reader of the XML that PSKC files are written in: elements, attributes, the five
/// predefined entities and character references, CDATA sections, comments, the XML
/// declaration and processing instructions. A document type declaration is refused (no
/// entity definitions, no external anything). Bounded: at most `maxSize` bytes, `maxDepth`
/// levels, `maxElements` elements, `maxAttributes` attributes on one element. Never traps on
/// any input; every error is `invalidParameters` with a short message that names the line
/// and never quotes the document (it may hold a secret).
public enum XMLReader {
    public static let maxSize = 4 * 1024 * 1024
    public static let maxDepth = 32
    public static let maxElements = 100_000
    public static let maxAttributes = 64

    static func isSpace(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0D }

    static func trimmed(_ text: [UInt8]) -> [UInt8] {
        guard let first = text.firstIndex(where: { !isSpace($0) }), let last = text.lastIndex(where: { !isSpace($0) }) else { return [] }
        return Array(text[first...last])
    }

    /// The root element of `bytes`.
    public static func parse(_ bytes: [UInt8]) throws(MFAError) -> XMLElementNode {
        var p = Parser(bytes)
        return try p.document()
    }
}

private struct Parser {
    let b: [UInt8]
    var i = 0
    var line = 1
    var elements = 0

    init(_ bytes: [UInt8]) { b = bytes }

    func fail(_ why: Message) -> MFAError {
        .invalidParameters("XML line " + Message(decimalBytes(UInt64(line))) + ": " + why)
    }

    var atEnd: Bool { i >= b.count }

    func peek(_ offset: Int = 0) -> UInt8? {
        let (j, o) = i.addingReportingOverflow(offset)
        guard !o, j >= 0, j < b.count else { return nil }
        return b[j]
    }

    /// True when the input at `i` starts with `s`.
    func at(_ s: StaticString) -> Bool {
        let lit = bytes(s)
        guard b.count - i >= lit.count else { return false }
        for k in 0..<lit.count where b[i + k] != lit[k] { return false }
        return true
    }

    mutating func advance(_ n: Int = 1) {
        var k = 0
        while k < n && i < b.count {
            if b[i] == 0x0A { line += 1 }
            i += 1
            k += 1
        }
    }

    mutating func skipSpace() {
        while let c = peek(), XMLReader.isSpace(c) { advance() }
    }

    /// Skips to just past `end`; fails with `what` if it never comes.
    mutating func skip(past end: StaticString, _ what: Message) throws(MFAError) {
        while !atEnd {
            if at(end) { advance(bytes(end).count); return }
            advance()
        }
        throw fail(what)
    }

    static func isNameByte(_ c: UInt8) -> Bool {
        switch c {
        case 0x41...0x5A, 0x61...0x7A, 0x30...0x39, 0x5F, 0x2D, 0x2E, 0x3A: return true
        default: return c >= 0x80  // non-ASCII name characters, taken as they are
        }
    }

    mutating func name() throws(MFAError) -> [UInt8] {
        let start = i
        while let c = peek(), Self.isNameByte(c) { advance() }
        guard i > start, i - start <= 256 else { throw fail("a name is missing or too long") }
        let n = b[start..<i]
        guard let first = n.first, first != 0x2D, first != 0x2E, !(0x30...0x39).contains(first) else { throw fail("a name starts with a digit, '-' or '.'") }
        // A prefix and a local part, both present ("a:", ":a" and "a:b:c" are no names).
        guard first != 0x3A, n.last != 0x3A, n.filter({ $0 == 0x3A }).count <= 1 else { throw fail("a name's prefix or local part is empty") }
        return Array(n)
    }

    /// Appends text that may be a secret (base64 of a key): when the buffer must grow, the old
    /// one is wiped before it is freed, so no partial copy is left in freed memory.
    static func append(_ bytes: ArraySlice<UInt8>, to text: inout [UInt8]) {
        if !text.isEmpty && text.capacity - text.count < bytes.count {
            var grown: [UInt8] = []
            grown.reserveCapacity((text.count + bytes.count) * 2)
            grown += text
            wipe(&text)
            text = grown
        }
        text += bytes
    }

    static func local(_ qualified: [UInt8]) -> [UInt8] {
        guard let colon = qualified.lastIndex(of: 0x3A) else { return qualified }
        return Array(qualified[(colon + 1)...])
    }

    /// `&...;` at `i`, appended to `out` as UTF-8.
    mutating func reference(into out: inout [UInt8]) throws(MFAError) {
        advance()  // '&'
        let start = i
        while let c = peek(), c != 0x3B {
            guard i - start < 12 else { throw fail("an entity reference is too long or has no ';'") }
            advance()
        }
        guard peek() == 0x3B else { throw fail("an entity reference has no ';'") }
        let ref = b[start..<i]
        advance()  // ';'
        if equals(ref, "lt") { out.append(0x3C); return }
        if equals(ref, "gt") { out.append(0x3E); return }
        if equals(ref, "amp") { out.append(0x26); return }
        if equals(ref, "quot") { out.append(0x22); return }
        if equals(ref, "apos") { out.append(0x27); return }
        guard ref.first == 0x23 else { throw fail("an unknown entity (only &lt; &gt; &amp; &quot; &apos; and &#N; are read)") }
        var digits = ref.dropFirst()
        var radix: UInt32 = 10
        if digits.first == 0x78 { radix = 16; digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.count <= 8 else { throw fail("a character reference is malformed") }
        var v: UInt32 = 0
        for c in digits {
            let d: UInt32
            switch c {
            case 0x30...0x39: d = UInt32(c - 0x30)
            case 0x61...0x66 where radix == 16: d = UInt32(c - 0x61 + 10)
            case 0x41...0x46 where radix == 16: d = UInt32(c - 0x41 + 10)
            default: throw fail("a character reference is malformed")
            }
            v = v &* radix &+ d  // at most 8 digits: below 2^32
        }
        guard v == 0x9 || v == 0xA || v == 0xD || (v >= 0x20 && v <= 0xD7FF) || (v >= 0xE000 && v <= 0xFFFD)
                || (v >= 0x10000 && v <= 0x10FFFF) else {
            throw fail("a character reference names a character XML does not allow")
        }
        Self.appendUTF8(v, to: &out)
    }

    static func appendUTF8(_ v: UInt32, to out: inout [UInt8]) {
        switch v {
        case 0..<0x80:
            out.append(UInt8(truncatingIfNeeded: v))
        case 0x80..<0x800:
            out.append(UInt8(truncatingIfNeeded: 0xC0 | (v >> 6)))
            out.append(UInt8(truncatingIfNeeded: 0x80 | (v & 0x3F)))
        case 0x800..<0x10000:
            out.append(UInt8(truncatingIfNeeded: 0xE0 | (v >> 12)))
            out.append(UInt8(truncatingIfNeeded: 0x80 | ((v >> 6) & 0x3F)))
            out.append(UInt8(truncatingIfNeeded: 0x80 | (v & 0x3F)))
        default:
            out.append(UInt8(truncatingIfNeeded: 0xF0 | (v >> 18)))
            out.append(UInt8(truncatingIfNeeded: 0x80 | ((v >> 12) & 0x3F)))
            out.append(UInt8(truncatingIfNeeded: 0x80 | ((v >> 6) & 0x3F)))
            out.append(UInt8(truncatingIfNeeded: 0x80 | (v & 0x3F)))
        }
    }

    /// Comments, processing instructions (the XML declaration is one) and white space, as
    /// allowed before and after the root element. A DOCTYPE is refused.
    mutating func misc() throws(MFAError) {
        while true {
            skipSpace()
            if at("<!--") {
                advance(4)
                try skip(past: "-->", "a comment is not closed")
            } else if at("<?") {
                advance(2)
                try skip(past: "?>", "a processing instruction is not closed")
            } else if at("<!DOCTYPE") || at("<!doctype") {
                throw fail("a DOCTYPE is not accepted (PSKC files have none)")
            } else {
                return
            }
        }
    }

    mutating func document() throws(MFAError) -> XMLElementNode {
        guard b.count <= XMLReader.maxSize else { throw .invalidParameters("the file is larger than 4 MiB") }
        guard !b.isEmpty else { throw .invalidParameters("the file is empty") }
        guard !b.contains(0) else { throw .invalidParameters("the file contains a NUL byte; not XML") }
        if peek() == 0xEF && peek(1) == 0xBB && peek(2) == 0xBF { advance(3) }  // a UTF-8 byte order mark
        try misc()
        guard peek() == 0x3C, let next = peek(1), Self.isNameByte(next) else { throw fail("no root element") }
        let root = try element()
        try misc()
        guard atEnd else { throw fail("content after the root element") }
        return root
    }

    /// An open element being read: its qualified name (to match the end tag) and itself.
    struct Open {
        var qualified: [UInt8]
        var element: XMLElementNode
    }

    /// Reads a start tag at `i` (just at '<'). Returns the element and whether it was empty (`/>`).
    mutating func startTag() throws(MFAError) -> (qualified: [UInt8], element: XMLElementNode, empty: Bool) {
        advance()  // '<'
        let qualified = try name()
        elements += 1
        guard elements <= XMLReader.maxElements else { throw fail("more than 100000 elements") }
        var element = XMLElementNode(name: Self.local(qualified))
        var seen: [[UInt8]] = []
        while true {
            let hadSpace = peek().map(XMLReader.isSpace) ?? false
            skipSpace()
            guard let c = peek() else { throw fail("a tag is not closed") }
            if c == 0x3E { advance(); return (qualified, element, false) }
            if c == 0x2F {
                guard peek(1) == 0x3E else { throw fail("'/' in a tag not followed by '>'") }
                advance(2)
                return (qualified, element, true)
            }
            guard hadSpace else { throw fail("attributes must be separated by white space") }
            let attribute = try name()
            guard !seen.contains(attribute) else { throw fail("an attribute appears twice") }
            seen.append(attribute)
            guard seen.count <= XMLReader.maxAttributes else { throw fail("too many attributes") }
            skipSpace()
            guard peek() == 0x3D else { throw fail("an attribute has no '='") }
            advance()
            skipSpace()
            guard let quote = peek(), quote == 0x22 || quote == 0x27 else { throw fail("an attribute value is not quoted") }
            advance()
            var value: [UInt8] = []
            while true {
                guard let v = peek() else { throw fail("an attribute value is not closed") }
                if v == quote { advance(); break }
                if v == 0x3C { throw fail("'<' in an attribute value") }
                if v == 0x26 { try reference(into: &value); continue }
                // Attribute-value normalisation: white space becomes a space.
                value.append(XMLReader.isSpace(v) ? 0x20 : v)
                advance()
            }
            // Namespace declarations are not attributes of the document's content.
            if equals(attribute, "xmlns") || attribute.starts(with: bytes("xmlns:")) { continue }
            element.attributes.append((Self.local(attribute), value))
        }
    }

    /// The element at `i` and everything in it, without recursion (a stack bounded by maxDepth).
    mutating func element() throws(MFAError) -> XMLElementNode {
        let first = try startTag()
        if first.empty { return first.element }
        var stack: [Open] = [Open(qualified: first.qualified, element: first.element)]
        while true {
            guard let c = peek(), stack.count > 0 else { throw fail("the document ends inside an element") }
            if c == 0x3C {
                if at("</") {
                    advance(2)
                    let qualified = try name()
                    skipSpace()
                    guard peek() == 0x3E else { throw fail("an end tag is not closed") }
                    advance()
                    guard let open = stack.popLast(), open.qualified == qualified else {
                        throw fail("an end tag does not match its start tag")
                    }
                    if stack.isEmpty { return open.element }
                    stack[stack.count - 1].element.children.append(open.element)
                } else if at("<!--") {
                    advance(4)
                    try skip(past: "-->", "a comment is not closed")
                } else if at("<![CDATA[") {
                    advance(9)
                    let start = i
                    try skip(past: "]]>", "a CDATA section is not closed")
                    Self.append(b[start..<(i - 3)], to: &stack[stack.count - 1].element.text)
                } else if at("<?") {
                    advance(2)
                    try skip(past: "?>", "a processing instruction is not closed")
                } else if at("<!") {
                    throw fail("a declaration inside an element")
                } else {
                    let tag = try startTag()
                    if tag.empty {
                        stack[stack.count - 1].element.children.append(tag.element)
                    } else {
                        guard stack.count < XMLReader.maxDepth else { throw fail("elements nested more than 32 deep") }
                        stack.append(Open(qualified: tag.qualified, element: tag.element))
                    }
                }
            } else if c == 0x26 {
                var character: [UInt8] = []
                try reference(into: &character)
                Self.append(character[...], to: &stack[stack.count - 1].element.text)
            } else {
                // A run of text up to the next markup, appended at once.
                let start = i
                while let d = peek(), d != 0x3C, d != 0x26 {
                    if d == 0x5D && at("]]>") { throw fail("']]>' in text") }
                    advance()
                }
                Self.append(b[start..<i], to: &stack[stack.count - 1].element.text)
            }
        }
    }
}
