internal import CAppAttestOpenSSL

/// A failure inside OpenSSL, with the thread's whole error queue drained into text (CONTRIBUTING.md, “OpenSSL and
/// libcbor”: the queue is per
/// thread; clear it before an operation, drain it after a failure).
package struct OpenSSLError: Error, Sendable, CustomStringConvertible {
    package let operation: String
    package let queue: [String]

    package var description: String {
        queue.isEmpty ? "\(operation) failed" : "\(operation) failed: \(queue.joined(separator: "; "))"
    }

    /// Drains the calling thread's OpenSSL error queue.
    static func drain(_ operation: String) -> OpenSSLError {
        var entries: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            // Keep a bounded amount of text: a hostile input must not produce an unbounded message.
            if entries.count < 8 {
                entries.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
        }
        return OpenSSLError(operation: operation, queue: entries)
    }
}

/// Clears the calling thread's OpenSSL error queue before an operation whose failure we want to report alone.
@inline(__always)
func clearOpenSSLErrors() {
    ERR_clear_error()
}

/// Runs one of OpenSSL's `d2i_*` decoders over `bytes` and reports how many bytes it consumed, since the
/// decoders ignore trailing bytes (CONTRIBUTING.md, “OpenSSL and libcbor”): callers compare `consumed` with
/// `bytes.count`.
func decodeDER(
    _ bytes: [UInt8], with decoder: (UnsafeMutablePointer<UnsafePointer<UInt8>?>, Int) -> OpaquePointer?
) -> (object: OpaquePointer?, consumed: Int) {
    bytes.withUnsafeBufferPointer { buffer in
        var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
        let object = decoder(&cursor, buffer.count)
        guard let cursor, let base = buffer.baseAddress else { return (object, 0) }
        return (object, cursor - base)
    }
}
