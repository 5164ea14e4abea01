package import Foundation

package struct InputError: Error, CustomStringConvertible {
    package var description: String

    package init(description: String) {
        self.description = description
    }
}

/// Reads a file, or standard input for `-`, refusing more than `limit` bytes.
package func readInput(_ path: String, limit: Int) throws -> Data {
    let handle: FileHandle
    if path == "-" {
        handle = FileHandle.standardInput
    } else {
        guard let opened = FileHandle(forReadingAtPath: path) else {
            throw InputError(description: "cannot open \(Terminal.safe(path, limit: 256))")
        }
        handle = opened
    }
    defer { if path != "-" { try? handle.close() } }
    var data = Data()
    while true {
        guard let chunk = try handle.read(upToCount: 64 * 1024), !chunk.isEmpty else { break }
        data.append(chunk)
        if data.count > limit {
            throw InputError(description: "\(Terminal.safe(path, limit: 256)): input larger than \(limit) bytes")
        }
    }
    return data
}

/// Reads an object given as binary or as Base64 text (standard or URL-safe, whitespace ignored). Binary is
/// recognised by its first byte: a CBOR map head (0xA0–0xBF) by default, which Base64 text never starts with.
package func readObject(_ path: String, limit: Int = 256 * 1024, binaryFirstBytes: [UInt8] = Array(0xA0...0xBF)) throws
    -> [UInt8]
{
    let data = try readInput(path, limit: limit)
    if let first = data.first, binaryFirstBytes.contains(first) { return Array(data) }
    guard let text = String(data: data, encoding: .utf8) else {
        throw InputError(description: "\(Terminal.safe(path, limit: 256)): neither CBOR nor Base64 text")
    }
    guard let bytes = decodeBase64(text) else {
        throw InputError(description: "\(Terminal.safe(path, limit: 256)): neither CBOR nor Base64 text")
    }
    return bytes
}

/// Decodes standard or URL-safe Base64, padded or not, ignoring whitespace.
package func decodeBase64(_ text: String) -> [UInt8]? {
    var cleaned = String(text.unicodeScalars.filter { !CharacterSet.whitespacesAndNewlines.contains($0) })
    cleaned = cleaned.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while cleaned.count % 4 != 0 { cleaned.append("=") }
    return Data(base64Encoded: cleaned).map(Array.init)
}
