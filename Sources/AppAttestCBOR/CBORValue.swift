/// A decoded CBOR data item (RFC 8949), copied out of libcbor into Swift values at the boundary.
///
/// Maps keep the order in which their entries were encoded; a map with two equal keys is refused by the
/// decoder, so looking a key up is unambiguous.
public indirect enum CBORValue: Sendable, Hashable {
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
    public subscript(key: String) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        return entries.first { $0.key == .textString(key) }?.value
    }

    /// The entry of a map with this integer key, if any (COSE labels).
    public subscript(integerKey key: Int64) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        let wanted: CBORValue = key >= 0 ? .unsignedInteger(UInt64(key)) : .negativeInteger(UInt64(-1 - key))
        return entries.first { $0.key == wanted }?.value
    }

    /// The value as a signed integer, when it is an integer that fits in `Int64`.
    public var int64Value: Int64? {
        switch self {
        case .unsignedInteger(let n): return n <= UInt64(Int64.max) ? Int64(n) : nil
        case .negativeInteger(let n): return n <= UInt64(Int64.max) ? -1 - Int64(n) : nil
        default: return nil
        }
    }
}

/// One key–value pair of a CBOR map.
public struct CBORMapEntry: Sendable, Hashable {
    public var key: CBORValue
    public var value: CBORValue

    public init(key: CBORValue, value: CBORValue) {
        self.key = key
        self.value = value
    }
}

/// Why bytes are not an acceptable CBOR item. Every case is a rejection of the input, never a crash.
public enum CBORError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The input is larger than the decoder's limit.
    case inputTooLarge(size: Int, limit: Int)
    /// The input ends inside an item.
    case truncated
    /// Bytes follow the item.
    case trailingBytes(count: Int)
    /// Containers nest deeper than the decoder's limit.
    case nestingTooDeep(limit: Int)
    /// An array or map declares more elements than the remaining bytes could hold.
    case declaredLengthExceedsInput
    /// Indefinite-length items are not used by App Attest (SPEC §1.1) and are refused.
    case indefiniteLength
    /// A text string is not valid UTF-8.
    case invalidUTF8
    /// A map has the same key twice.
    case duplicateMapKey
    /// A reserved or malformed initial byte.
    case malformed

    public var description: String {
        switch self {
        case .inputTooLarge(let size, let limit): return "CBOR input of \(size) bytes exceeds the limit of \(limit)"
        case .truncated: return "CBOR input ends inside an item"
        case .trailingBytes(let count): return "\(count) bytes follow the CBOR item"
        case .nestingTooDeep(let limit): return "CBOR nesting deeper than \(limit)"
        case .declaredLengthExceedsInput: return "a CBOR container declares more elements than the input holds"
        case .indefiniteLength: return "indefinite-length CBOR items are not accepted"
        case .invalidUTF8: return "a CBOR text string is not valid UTF-8"
        case .duplicateMapKey: return "a CBOR map repeats a key"
        case .malformed: return "malformed CBOR"
        }
    }
}
