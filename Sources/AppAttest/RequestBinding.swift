internal import AppAttestCrypto
import Foundation

/// The canonical client data of an HTTP request protected by App Attest: what the app hashes and passes to
/// `generateAssertion`, so that an assertion is bound to one method, path, body and one-time challenge and cannot be
/// replayed against another request (“Verifying assertions and counters”).
///
/// ```
/// clientData = "app-attest-request-v1" ‖ 0x00 ‖ METHOD ‖ 0x00 ‖ path-and-query ‖ 0x00 ‖ SHA-256(body) (32 bytes)
///              ‖ challenge (the raw bytes the server issued)
/// ```
///
/// On iOS, with `pathAndQuery` exactly as the server will see it (`URLComponents.percentEncodedPath`, `?` and
/// `percentEncodedQuery`: `URL.path` is percent-decoded and drops a trailing slash; the complete app-side code is in
/// the AppAttestHummingbird documentation, "Protecting routes"):
/// ```swift
/// var clientData = Data("app-attest-request-v1".utf8) + [0]
/// clientData += Data(request.httpMethod!.uppercased().utf8) + [0] + Data(pathAndQuery.utf8) + [0]
/// clientData += Data(SHA256.hash(data: body)) + challenge
/// let assertion = try await DCAppAttestService.shared.generateAssertion(
///     keyId, clientDataHash: Data(SHA256.hash(data: clientData)))
/// request.setValue(keyId, forHTTPHeaderField: "App-Attest-Key-Id")
/// request.setValue(assertion.base64EncodedString(), forHTTPHeaderField: "App-Attest-Assertion")
/// request.setValue(challenge.base64URLEncoded, forHTTPHeaderField: "App-Attest-Challenge")
/// ```
public enum AppAttestRequestBinding {
    /// The first field of the client data: names the binding and its version.
    public static let domain = "app-attest-request-v1"

    /// The client data for a request.
    public static func clientData(
        method: String, pathAndQuery: String, body: some Collection<UInt8>, challenge: [UInt8]
    ) -> [UInt8] {
        clientData(
            method: method, pathAndQuery: pathAndQuery, bodySHA256: SHA256.hash(Array(body)), challenge: challenge)
    }

    /// The client data for a request whose body the caller has already hashed (SHA-256, 32 bytes).
    public static func clientData(method: String, pathAndQuery: String, bodySHA256: [UInt8], challenge: [UInt8])
        -> [UInt8]
    {
        var data = Array(domain.utf8) + [0]
        data += Array(method.uppercased().utf8) + [0]
        data += Array(pathAndQuery.utf8) + [0]
        data += bodySHA256
        data += challenge
        return data
    }

    /// The first field of a timestamped binding (no challenge; freshness from a signed timestamp and the counter).
    public static let timestampedDomain = "app-attest-request-v1-time"

    /// The client data of a request bound by time rather than a challenge:
    /// `"app-attest-request-v1-time" ‖ 0x00 ‖ METHOD ‖ 0x00 ‖ path-and-query ‖ 0x00 ‖ SHA-256(body) ‖ milliseconds`,
    /// the last field the Unix time in milliseconds as 8 bytes, big-endian. The separate domain keeps the two layouts
    /// apart: neither can be read as the other.
    public static func clientData(
        method: String, pathAndQuery: String, bodySHA256: [UInt8], timestampMilliseconds: Int64
    ) -> [UInt8] {
        var data = Array(timestampedDomain.utf8) + [0]
        data += Array(method.uppercased().utf8) + [0]
        data += Array(pathAndQuery.utf8) + [0]
        data += bodySHA256
        data += (0..<8).reversed().map {
            UInt8(truncatingIfNeeded: UInt64(bitPattern: timestampMilliseconds) >> ($0 * 8))
        }
        return data
    }

    /// The longest method accepted in a binding, in bytes.
    public static let maximumMethodLength = 20
    /// The longest path and query accepted in a binding, in bytes.
    public static let maximumPathAndQueryLength = 8192

    /// True when `method` is an HTTP method token (RFC 9110 `tchar`s) of at most ``maximumMethodLength`` bytes.
    public static func isValidMethod(_ method: String) -> Bool {
        let bytes = method.utf8
        guard !bytes.isEmpty, bytes.count <= maximumMethodLength else { return false }
        return bytes.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    /// True when `pathAndQuery` is an origin-form request target as it travels: it starts with `/`, holds only
    /// visible ASCII (no space, NUL or other control byte: anything else is percent-encoded) and has at most
    /// ``maximumPathAndQueryLength`` bytes.
    public static func isValidPathAndQuery(_ pathAndQuery: String) -> Bool {
        let bytes = pathAndQuery.utf8
        guard bytes.first == 0x2F, bytes.count <= maximumPathAndQueryLength else { return false }
        return bytes.allSatisfy { (0x21...0x7E).contains($0) }
    }

    /// Base64URL without padding.
    package static func base64URL(_ bytes: [UInt8]) -> String {
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
