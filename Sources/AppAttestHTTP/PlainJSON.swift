#if HTTP
extension AppAttestAssertionInput.JSONBody {
    /// The usual verification body read without Foundation's decoder, which costs about 3 % of a verification's CPU:
    /// a flat object whose members are `keyId`, `assertion`, `clientData` and `challenge` as strings of printable
    /// ASCII without escapes (Base64 always is), and `issueNextChallenge` as `true` or `false`, each at most once.
    ///
    /// Anything else returns nil: escapes, other characters, numbers, `null`, nested values (`request`), a member
    /// named twice or not known, trailing bytes. The caller then decodes with `JSONDecoder`, so that every body gets
    /// the decoder's answer; for the bodies read here both give the same value (`PlainJSONTests`).
    package init?(plain body: some Collection<UInt8>) {
        guard body.count <= AppAttestHTTPLimits.maximumJSONBodySize,
            let parsed = body.withContiguousStorageIfAvailable({ Self(plain: $0) }) ?? nil
        else { return nil }
        self = parsed
    }

    private init?(plain bytes: UnsafeBufferPointer<UInt8>) {
        var scanner = PlainJSONScanner(bytes: bytes)
        var keyId: String?
        var assertion: String?
        var clientData: String?
        var challenge: String?
        var issueNextChallenge: Bool?
        guard scanner.consume(UInt8(ascii: "{")) else { return nil }
        repeat {
            guard let name = scanner.plainString(), scanner.consume(UInt8(ascii: ":")) else { return nil }
            let read: Bool
            switch name {
            case "keyId": read = scanner.plainString(into: &keyId)
            case "assertion": read = scanner.plainString(into: &assertion)
            case "clientData": read = scanner.plainString(into: &clientData)
            case "challenge": read = scanner.plainString(into: &challenge)
            case "issueNextChallenge":
                guard issueNextChallenge == nil else { return nil }
                issueNextChallenge = scanner.boolean()
                read = issueNextChallenge != nil
            default: read = false
            }
            guard read else { return nil }
        } while scanner.consume(UInt8(ascii: ","))
        guard scanner.consume(UInt8(ascii: "}")), scanner.atEnd, let keyId, let assertion else { return nil }
        self.init(
            keyId: keyId, assertion: assertion, clientData: clientData, challenge: challenge, request: nil,
            issueNextChallenge: issueNextChallenge)
    }
}

/// The few JSON tokens ``AppAttestAssertionInput/JSONBody/init(plain:)`` reads, each after optional white space.
private struct PlainJSONScanner {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0

    /// Past the end, white space after the last token aside.
    var atEnd: Bool {
        mutating get {
            skipWhitespace()
            return index == bytes.count
        }
    }

    mutating func consume(_ byte: UInt8) -> Bool {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// A string of printable ASCII (0x20–0x7E) without a backslash; nil for any other token.
    mutating func plainString() -> String? {
        guard consume(UInt8(ascii: "\"")) else { return nil }
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                defer { index += 1 }
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            }
            guard byte >= 0x20, byte <= 0x7E, byte != UInt8(ascii: "\\") else { return nil }
            index += 1
        }
        return nil
    }

    /// A plain string into an empty `slot`; false for a member named twice or any other token.
    mutating func plainString(into slot: inout String?) -> Bool {
        guard slot == nil, let value = plainString() else { return false }
        slot = value
        return true
    }

    mutating func boolean() -> Bool? {
        if literal("true") { return true }
        if literal("false") { return false }
        return nil
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        skipWhitespace()
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count,
            bytes[index..<index + count].elementsEqual(UnsafeBufferPointer(start: word.utf8Start, count: count))
        else { return false }
        index += count
        return true
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }
}
#endif  // HTTP
