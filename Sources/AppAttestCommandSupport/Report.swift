import AppAttest
package import AppAttestCBOR
package import Foundation

/// A small ordered tree that prints both for a person (indented lines) and as JSON, so that `inspect` and
/// `verify` show the same facts in both forms.
package indirect enum Report {
    case text(String)
    case number(Int64)
    case bool(Bool)
    case null
    case object([(String, Report)])
    case list([Report])

    /// Indented `key: value` lines.
    package func render(indent: Int = 0) -> String {
        var out = ""
        write(into: &out, indent: indent)
        return out
    }

    private func write(into out: inout String, indent: Int) {
        let pad = String(repeating: "  ", count: indent)
        switch self {
        case .object(let fields):
            for (key, value) in fields {
                switch value {
                case .object(let inner) where !inner.isEmpty:
                    out += "\(pad)\(Terminal.safe(key)):\n"
                    value.write(into: &out, indent: indent + 1)
                case .list(let items) where !items.isEmpty:
                    out += "\(pad)\(Terminal.safe(key)):\n"
                    for (index, item) in items.enumerated() {
                        if case .object = item {
                            out += "\(pad)  [\(index)]\n"
                            item.write(into: &out, indent: indent + 2)
                        } else {
                            out += "\(pad)  - \(item.scalar)\n"
                        }
                    }
                default:
                    out += "\(pad)\(Terminal.safe(key)): \(value.scalar)\n"
                }
            }
        case .list(let items):
            for item in items { item.write(into: &out, indent: indent) }
        default:
            out += "\(pad)\(scalar)\n"
        }
    }

    private var scalar: String {
        switch self {
        case .text(let text): return Terminal.safe(text)
        case .number(let number): return String(number)
        case .bool(let value): return String(value)
        case .null: return "(none)"
        case .object(let fields): return fields.isEmpty ? "{}" : "{…}"
        case .list(let items): return items.isEmpty ? "[]" : "[…]"
        }
    }

    /// The same tree as JSON, keys in order.
    package func json() -> String {
        switch self {
        case .text(let text): return Self.quote(text)
        case .number(let number): return String(number)
        case .bool(let value): return String(value)
        case .null: return "null"
        case .object(let fields):
            return "{" + fields.map { "\(Self.quote($0.0)):\($0.1.json())" }.joined(separator: ",") + "}"
        case .list(let items): return "[" + items.map { $0.json() }.joined(separator: ",") + "]"
        }
    }

    private static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                // Escaped as `Terminal.safe` escapes text: controls (C0, DEL, C1 with its 8-bit CSI) and the bidi
                // overrides, which a hostile attestation, receipt or certificate would otherwise put on a terminal.
                if Terminal.isUnsafe(scalar) {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}

extension Report {
    package static func date(_ date: Date?) -> Report {
        guard let date else { return .null }
        return .text(ISO8601DateFormatter().string(from: date))
    }

    package static func optional(_ text: String?) -> Report { text.map(Report.text) ?? .null }

    /// CBOR in a readable form: maps and arrays as trees, bytes as hex.
    package static func cbor(_ value: CBORValue) -> Report {
        switch value {
        case .unsignedInteger(let n): return n <= UInt64(Int64.max) ? .number(Int64(n)) : .text(String(n))
        case .negativeInteger(let n): return n < UInt64(Int64.max) ? .number(-1 - Int64(n)) : .text("-1-\(n)")
        case .byteString(let bytes): return .text("h'\(bytes.hexString)'")
        case .textString(let text): return .text(text)
        case .array(let items): return .list(items.map(cbor))
        case .map(let entries): return .object(entries.map { (keyText($0.key), cbor($0.value)) })
        case .tagged(let tag, let inner): return .object([("tag \(tag)", cbor(inner))])
        case .boolean(let value): return .bool(value)
        case .null, .undefined: return .null
        case .float(let number): return .text(String(number))
        }
    }

    private static func keyText(_ key: CBORValue) -> String {
        switch key {
        case .textString(let text): return text
        case .unsignedInteger(let n): return String(n)
        case .negativeInteger(let n): return n < UInt64(Int64.max) ? String(-1 - Int64(n)) : "-1-\(n)"
        case .byteString(let bytes): return "h'\(bytes.hexString)'"
        default: return "\(key)"
        }
    }
}

/// Text from files and arguments made safe to print on a terminal: control characters (C0, DEL, C1) and the
/// Unicode controls that reorder text are shown as `\u{…}` escapes, so that a hostile file can neither move the
/// cursor, repaint the screen nor forge a line; and anything beyond `limit` characters is cut with a count.
package enum Terminal {
    package static func safe(_ text: String, limit: Int = 1000) -> String {
        var out = ""
        var count = 0
        for scalar in text.unicodeScalars {
            if count == limit {
                let rest = text.unicodeScalars.count - limit
                out += "…(\(rest) more characters)"
                break
            }
            count += 1
            if isUnsafe(scalar) {
                out += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Whether a terminal would act on `scalar` rather than show it: a control character (C0, DEL, C1) or a bidi
    /// override or isolate.
    static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}
