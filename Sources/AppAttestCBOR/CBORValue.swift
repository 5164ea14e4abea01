/// A decoded CBOR data item (RFC 8949), copied out of libcbor into Swift values at the boundary.
///
/// Maps keep the order in which their entries were encoded; a map with two equal keys is refused by the
/// decoder, so looking a key up is unambiguous.
package indirect enum CBORValue: Sendable, Hashable {
    /// Major type 0.
    case unsignedInteger(UInt64)
    /// Major type 1: the value is `-1 - n`, stored as `n` so that every encodable value fits.
    case negativeInteger(UInt64)
    /// Major type 2 (definite length only).
    case byteString([UInt8])
    /// Major type 3, valid UTF-8 (definite length only).
    case textString(String)
    /// Major type 4 (definite length only).
    case array([CBORValue])
    /// Major type 5, entries in encoded order (definite length only).
    case map([CBORMapEntry])
    /// Major type 6.
    case tagged(UInt64, CBORValue)
    /// Major type 7: `false`, `true`.
    case boolean(Bool)
    /// Major type 7: `null`.
    case null
    /// Major type 7: `undefined`.
    case undefined
    /// Major type 7: half, single or double precision float.
    case float(Double)

    /// The entry of a map with this text key, if any.
    package subscript(key: String) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        return entries.first { $0.key == .textString(key) }?.value
    }

    /// The entry of a map with this integer key, if any (COSE labels).
    package subscript(integerKey key: Int64) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        let wanted: CBORValue = key >= 0 ? .unsignedInteger(UInt64(key)) : .negativeInteger(UInt64(-1 - key))
        return entries.first { $0.key == wanted }?.value
    }

    /// The value as a signed integer, when it is an integer that fits in `Int64`.
    package var int64Value: Int64? {
        switch self {
        case .unsignedInteger(let n): return n <= UInt64(Int64.max) ? Int64(n) : nil
        case .negativeInteger(let n): return n <= UInt64(Int64.max) ? -1 - Int64(n) : nil
        default: return nil
        }
    }
}

/// One key–value pair of a CBOR map.
package struct CBORMapEntry: Sendable, Hashable {
    package var key: CBORValue
    package var value: CBORValue

    package init(key: CBORValue, value: CBORValue) {
        self.key = key
        self.value = value
    }
}

/// Why bytes are not an acceptable CBOR item. Every error is a rejection of the input, never a crash.
///
/// A struct with static members rather than an enum, so that new reasons can be added without breaking code
/// that matches on the existing ones.
package struct CBORError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, without the numbers.
    package struct Code: Hashable, Sendable, CustomStringConvertible {
        package let description: String
        private init(_ description: String) { self.description = description }

        package static let inputTooLarge = Code("inputTooLarge")
        package static let truncated = Code("truncated")
        package static let trailingBytes = Code("trailingBytes")
        package static let nestingTooDeep = Code("nestingTooDeep")
        package static let declaredLengthExceedsInput = Code("declaredLengthExceedsInput")
        package static let indefiniteLength = Code("indefiniteLength")
        package static let invalidUTF8 = Code("invalidUTF8")
        package static let duplicateMapKey = Code("duplicateMapKey")
        package static let unsupportedMapKey = Code("unsupportedMapKey")
        package static let malformed = Code("malformed")
    }

    /// The reason.
    package let code: Code
    /// A sentence with the sizes involved (never the input's bytes).
    package let description: String

    private init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }

    /// The input is larger than the decoder's limit.
    package static func inputTooLarge(size: Int, limit: Int) -> CBORError {
        CBORError(.inputTooLarge, "CBOR input of \(size) bytes exceeds the limit of \(limit)")
    }
    /// The input ends inside an item.
    package static let truncated = CBORError(.truncated, "CBOR input ends inside an item")
    /// Bytes follow the item.
    package static func trailingBytes(count: Int) -> CBORError {
        CBORError(.trailingBytes, "\(count) bytes follow the CBOR item")
    }
    /// Containers nest deeper than the decoder's limit.
    package static func nestingTooDeep(limit: Int) -> CBORError {
        CBORError(.nestingTooDeep, "CBOR nesting deeper than \(limit)")
    }
    /// An array or map declares more elements than the remaining bytes could hold.
    package static let declaredLengthExceedsInput = CBORError(
        .declaredLengthExceedsInput, "a CBOR container declares more elements than the input holds")
    /// Indefinite-length items are never produced by App Attest devices, so they are refused.
    package static let indefiniteLength = CBORError(.indefiniteLength, "indefinite-length CBOR items are not accepted")
    /// A text string is not valid UTF-8.
    package static let invalidUTF8 = CBORError(.invalidUTF8, "a CBOR text string is not valid UTF-8")
    /// A map has the same key twice.
    package static let duplicateMapKey = CBORError(.duplicateMapKey, "a CBOR map repeats a key")
    /// A map key that is not an integer or a text or byte string: App Attest and COSE use no other, and one that
    /// never equals itself (a NaN, or a container holding one) would make the duplicate check quadratic.
    package static let unsupportedMapKey = CBORError(
        .unsupportedMapKey, "a CBOR map key is not an integer or a text or byte string")
    /// A reserved or malformed initial byte.
    package static let malformed = CBORError(.malformed, "malformed CBOR")
}
