/// Encodes `CBORValue`s in the deterministic form of RFC 8949 §4.2.1 (shortest heads, definite lengths), with
/// map entries in the order given. For building test objects and re-encoding; verification never re-encodes
/// what it hashes (“Verifying assertions and counters”).
package enum CBOREncoder {
    /// The encoding of `value`.
    package static func encode(_ value: CBORValue) -> [UInt8] {
        var out: [UInt8] = []
        append(value, to: &out)
        return out
    }

    private static func append(_ value: CBORValue, to out: inout [UInt8]) {
        switch value {
        case .unsignedInteger(let n): head(0, n, &out)
        case .negativeInteger(let n): head(1, n, &out)
        case .byteString(let bytes):
            head(2, UInt64(bytes.count), &out)
            out += bytes
        case .textString(let text):
            head(3, UInt64(text.utf8.count), &out)
            out += text.utf8
        case .array(let items):
            head(4, UInt64(items.count), &out)
            for item in items { append(item, to: &out) }
        case .map(let entries):
            head(5, UInt64(entries.count), &out)
            for entry in entries {
                append(entry.key, to: &out)
                append(entry.value, to: &out)
            }
        case .tagged(let tag, let inner):
            head(6, tag, &out)
            append(inner, to: &out)
        case .boolean(let value): out.append(value ? 0xF5 : 0xF4)
        case .null: out.append(0xF6)
        case .undefined: out.append(0xF7)
        case .float(let number):
            out.append(0xFB)
            let bits = number.bitPattern
            for shift in stride(from: 56, through: 0, by: -8) {
                out.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift)))
            }
        }
    }

    private static func head(_ major: UInt8, _ value: UInt64, _ out: inout [UInt8]) {
        let type = major << 5
        switch value {
        case 0..<24: out.append(type | UInt8(value))
        case 24..<0x100: out += [type | 24, UInt8(value)]
        case 0x100..<0x1_0000: out += [type | 25, UInt8(value >> 8), UInt8(truncatingIfNeeded: value)]
        case 0x1_0000..<0x1_0000_0000:
            out.append(type | 26)
            for shift in stride(from: 24, through: 0, by: -8) {
                out.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
            }
        default:
            out.append(type | 27)
            for shift in stride(from: 56, through: 0, by: -8) {
                out.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
            }
        }
    }
}
