import AppAttestCBOR
import Testing

@Suite("CBOR decoding behind limits")
struct CBORDecoderTests {
    let decoder = CBORDecoder()

    @Test("decodes every major type App Attest uses")
    func decodesTypes() throws {
        // {"a": [1, -7, h'0102', "x"], 1: true, -1: null}
        let bytes: [UInt8] = [0xA3, 0x61, 0x61, 0x84, 0x01, 0x26, 0x42, 0x01, 0x02, 0x61, 0x78, 0x01, 0xF5, 0x20, 0xF6]
        let value = try decoder.decode(bytes)
        #expect(
            value["a"] == .array([.unsignedInteger(1), .negativeInteger(6), .byteString([1, 2]), .textString("x")]))
        #expect(value[integerKey: 1] == .boolean(true))
        #expect(value[integerKey: -1] == .null)
        #expect(value[integerKey: -7] == nil)
        #expect(CBORValue.negativeInteger(6).int64Value == -7)
    }

    @Test("decodes 64-bit integers, tags, floats and empty containers")
    func decodesEdges() throws {
        #expect(try decoder.decode([0x1B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]) == .unsignedInteger(.max))
        #expect(try decoder.decode([0xC1, 0x01]) == .tagged(1, .unsignedInteger(1)))
        #expect(try decoder.decode([0xF9, 0x3C, 0x00]) == .float(1.0))
        #expect(try decoder.decode([0x80]) == .array([]))
        #expect(try decoder.decode([0xA0]) == .map([]))
        #expect(try decoder.decode([0x40]) == .byteString([]))
        #expect(try decoder.decode([0x60]) == .textString(""))
        #expect(try decoder.decode([0x81, 0x80]) == .array([.array([])]))
    }

    @Test("decodePrefix reports where the item ends")
    func prefix() throws {
        let (value, end) = try decoder.decodePrefix([0xFF, 0x82, 0x01, 0x02, 0x03], from: 1)
        #expect(value == .array([.unsignedInteger(1), .unsignedInteger(2)]))
        #expect(end == 4)
    }

    static let hostile: [(String, [UInt8], CBORError)] = [
        ("empty input", [], .truncated),
        ("truncated array", [0x82, 0x01], .declaredLengthExceedsInput),
        ("array missing its last element", [0x83, 0x01, 0x02, 0x45], .truncated),
        ("truncated byte string", [0x45, 0x01, 0x02], .truncated),
        ("truncated head", [0x19, 0x01], .truncated),
        ("trailing bytes", [0x01, 0x02], .trailingBytes(count: 1)),
        // A 9-byte head declaring 2^28 items made cbor_load allocate 2 GiB (CONTRIBUTING.md, “OpenSSL and libcbor”).
        ("array declaring 2^28 items", [0x9A, 0x10, 0x00, 0x00, 0x00, 0x01], .declaredLengthExceedsInput),
        (
            "array declaring 2^64-1 items", [0x9B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00],
            .declaredLengthExceedsInput
        ),
        ("map declaring 2^32-1 pairs", [0xBA, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x02], .declaredLengthExceedsInput),
        ("map with more pairs than bytes allow", [0xA2, 0x01, 0x02, 0x03], .declaredLengthExceedsInput),
        (
            "byte string declaring 2^64-1 bytes", [0x5B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00],
            .truncated
        ),
        ("text string declaring 4 GiB", [0x7A, 0xFF, 0xFF, 0xFF, 0xFF, 0x61], .truncated),
        ("indefinite array", [0x9F, 0x01, 0xFF], .indefiniteLength),
        ("indefinite map", [0xBF, 0x01, 0x02, 0xFF], .indefiniteLength),
        ("indefinite byte string", [0x5F, 0x41, 0x01, 0xFF], .indefiniteLength),
        ("indefinite text string", [0x7F, 0x61, 0x61, 0xFF], .indefiniteLength),
        ("lone break", [0xFF], .indefiniteLength),
        ("invalid UTF-8", [0x62, 0xC3, 0x28], .invalidUTF8),
        ("duplicate map key", [0xA2, 0x61, 0x61, 0x01, 0x61, 0x61, 0x02], .duplicateMapKey),
        // A NaN never equals itself: such keys were never found repeated, and each one's insertion compared it with
        // every key before it (all hash alike).
        ("NaN map keys", [0xA2, 0xF9, 0x7E, 0x00, 0x01, 0xF9, 0x7E, 0x00, 0x02], .unsupportedMapKey),
        ("array map key", [0xA1, 0x81, 0x01, 0x02], .unsupportedMapKey),
        (
            "16,383 NaN map keys",
            [0xB9, 0x3F, 0xFF] + Array(repeating: [0xF9, 0x7E, 0x00, 0x00], count: 16_383).joined(),
            .unsupportedMapKey
        ),
        ("reserved additional info", [0x1C], .malformed),
        ("reserved simple value", [0xFC], .malformed),
        ("tag without content", [0xC1], .declaredLengthExceedsInput),
        ("map missing a value", [0xA1, 0x01], .declaredLengthExceedsInput),
        ("negative-as-Int count (2^63)", [0x9B, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x00], .declaredLengthExceedsInput),
    ]

    @Test("hostile inputs are typed errors", arguments: hostile)
    func hostileInputs(_ name: String, _ bytes: [UInt8], _ expected: CBORError) {
        #expect(throws: expected, "\(name)") { try decoder.decode(bytes) }
    }

    @Test("nesting is bounded")
    func nesting() {
        let deep = [UInt8](repeating: 0x81, count: 100) + [0x01]
        #expect(throws: CBORError.nestingTooDeep(limit: 16)) { try decoder.decode(deep) }
        let ok = [UInt8](repeating: 0x81, count: 16) + [0x01]
        #expect(throws: Never.self) { try decoder.decode(ok) }
        // Tags count as nesting too.
        let tags = [UInt8](repeating: 0xC1, count: 100) + [0x01]
        #expect(throws: CBORError.nestingTooDeep(limit: 16)) { try decoder.decode(tags) }
    }

    @Test("input size is capped before anything is read")
    func sizeCap() {
        let small = CBORDecoder(maximumInputSize: 8)
        #expect(throws: CBORError.inputTooLarge(size: 9, limit: 8)) {
            try small.decode([UInt8](repeating: 0, count: 9))
        }
    }

    @Test("a large but honest input decodes")
    func largeHonest() throws {
        // An array of 60,000 small integers: 3-byte head + 60,000 bytes, decoded in linear time.
        let bytes: [UInt8] = [0x99, 0xEA, 0x60] + [UInt8](repeating: 0x07, count: 60_000)
        guard case .array(let items) = try decoder.decode(bytes) else { Issue.record("not an array"); return }
        #expect(items.count == 60_000)
    }
}

@Suite("CBOR encoding")
struct CBOREncoderTests {
    @Test(
        "encode then decode is the identity, with shortest heads",
        arguments: [
            CBORValue.unsignedInteger(0), .unsignedInteger(23), .unsignedInteger(24), .unsignedInteger(255),
            .unsignedInteger(256), .unsignedInteger(65_535), .unsignedInteger(65_536),
            .unsignedInteger(UInt64(UInt32.max)),
            .unsignedInteger(UInt64(UInt32.max) + 1), .unsignedInteger(.max), .negativeInteger(0),
            .negativeInteger(.max),
            .byteString([]), .byteString(Array(0..<200)), .textString("é"),
            .array([.null, .undefined, .boolean(false)]),
            .map([CBORMapEntry(key: .textString("k"), value: .tagged(2, .byteString([1])))]), .float(-2.5),
        ])
    func roundTrip(_ value: CBORValue) throws {
        let bytes = CBOREncoder.encode(value)
        #expect(try CBORDecoder().decode(bytes) == value)
    }

    @Test("heads use the shortest form")
    func shortest() {
        #expect(CBOREncoder.encode(.unsignedInteger(23)) == [0x17])
        #expect(CBOREncoder.encode(.unsignedInteger(24)) == [0x18, 0x18])
        #expect(CBOREncoder.encode(.negativeInteger(6)) == [0x26])
        #expect(CBOREncoder.encode(.unsignedInteger(0x1_0000)) == [0x1A, 0, 1, 0, 0])
    }
}
