import Foundation

/// The byte layout of a request binding, shared by the server (`AppAttestClientData` in the core) and the app
/// side (`AppAttestClient`), so that both halves build the same bytes from one definition. Pure Swift: it builds on
/// every platform App Attest runs on, without OpenSSL.
package enum RequestBindingLayout {
    /// The first field of a binding with a one-time challenge.
    package static let domain = "app-attest-request-v1"
    /// The first field of a timestamped binding.
    package static let timestampedDomain = "app-attest-request-v1-time"
    /// The longest method accepted in a binding, in bytes.
    package static let maximumMethodLength = 20
    /// The longest path and query accepted in a binding, in bytes.
    package static let maximumPathAndQueryLength = 8192

    /// `domain ‖ 0 ‖ METHOD ‖ 0 ‖ path-and-query ‖ 0 ‖ SHA-256(body) ‖ challenge`.
    package static func clientData(method: String, pathAndQuery: String, bodySHA256: [UInt8], challenge: [UInt8])
        -> [UInt8]
    {
        prefix(domain, method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256) + challenge
    }

    /// `timestampedDomain ‖ 0 ‖ METHOD ‖ 0 ‖ path-and-query ‖ 0 ‖ SHA-256(body) ‖ milliseconds (8 bytes, big-endian)`.
    package static func clientData(
        method: String, pathAndQuery: String, bodySHA256: [UInt8], timestampMilliseconds: Int64
    ) -> [UInt8] {
        prefix(timestampedDomain, method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256)
            + (0..<8).reversed().map {
                UInt8(truncatingIfNeeded: UInt64(bitPattern: timestampMilliseconds) >> ($0 * 8))
            }
    }

    private static func prefix(_ domain: String, method: String, pathAndQuery: String, bodySHA256: [UInt8])
        -> [UInt8]
    {
        var data = Array(domain.utf8) + [0]
        data += Array(method.uppercased().utf8) + [0]
        data += Array(pathAndQuery.utf8) + [0]
        data += bodySHA256
        return data
    }

    /// True when `method` is an HTTP method token (RFC 9110 `tchar`s) of at most ``maximumMethodLength`` bytes.
    package static func isValidMethod(_ method: String) -> Bool {
        let bytes = method.utf8
        guard !bytes.isEmpty, bytes.count <= maximumMethodLength else { return false }
        return bytes.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    /// True when `pathAndQuery` starts with `/`, holds only visible ASCII and has at most
    /// ``maximumPathAndQueryLength`` bytes.
    package static func isValidPathAndQuery(_ pathAndQuery: String) -> Bool {
        let bytes = pathAndQuery.utf8
        guard bytes.first == 0x2F, bytes.count <= maximumPathAndQueryLength else { return false }
        return bytes.allSatisfy { (0x21...0x7E).contains($0) }
    }

    /// Base64URL without padding.
    package static func base64URL(_ bytes: some Collection<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(
            of: "/", with: "_"
        )
        .replacingOccurrences(of: "=", with: "")
    }

    /// Decodes Base64URL (padding optional); nil for anything else or more than `limit` bytes.
    package static func decodeBase64URL(_ text: String, limit: Int = 4096) -> [UInt8]? {
        guard text.utf8.count <= limit * 2,
            text.utf8.allSatisfy({
                $0 == 0x2D || $0 == 0x5F || (0x30...0x39).contains($0)
                    || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) || $0 == 0x3D
            })
        else { return nil }
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while standard.count % 4 != 0 { standard.append("=") }
        return Data(base64Encoded: standard).map(Array.init)
    }

    /// Decodes standard Base64; nil for anything else or more than `limit` bytes.
    package static func decodeBase64(_ text: String, limit: Int = 64 * 1024) -> [UInt8]? {
        guard text.utf8.count <= limit * 2 else { return nil }
        return Data(base64Encoded: text).map(Array.init)
    }
}

/// The header fields of a protected request and its response, shared by the server and the app side.
package enum RequestBindingHeaders {
    /// The keyId, Base64.
    package static let keyID = "App-Attest-Key-Id"
    /// The assertion, Base64.
    package static let assertion = "App-Attest-Assertion"
    /// The one-time challenge the client data ends with, Base64URL.
    package static let challenge = "App-Attest-Challenge"
    /// In a response: the key's next challenge, Base64URL.
    package static let nextChallenge = "App-Attest-Next-Challenge"
    /// The signed Unix time in milliseconds, decimal.
    package static let timestamp = "App-Attest-Timestamp"
}
