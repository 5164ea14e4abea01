internal import CAppAttestOpenSSL

/// A failure inside OpenSSL, with the thread's whole error queue drained into text (SPEC §9: the queue is per
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
