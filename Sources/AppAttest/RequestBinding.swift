internal import AppAttestCrypto
internal import AppAttestWire
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
/// The app side builds the same bytes with `AppAttestClient` (product `AppAttestClient`), from the request exactly as
/// it travels: the percent-encoded path, trailing slash kept, `?` and the percent-encoded query.
public enum AppAttestRequestBinding {
    /// The first field of the client data: names the binding and its version.
    public static let domain = RequestBindingLayout.domain

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
        RequestBindingLayout.clientData(
            method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256, challenge: challenge)
    }

    /// The first field of a timestamped binding (no challenge; freshness from a signed timestamp and the counter).
    public static let timestampedDomain = RequestBindingLayout.timestampedDomain

    /// The client data of a request bound by time rather than a challenge:
    /// `"app-attest-request-v1-time" ‖ 0x00 ‖ METHOD ‖ 0x00 ‖ path-and-query ‖ 0x00 ‖ SHA-256(body) ‖ milliseconds`,
    /// the last field the Unix time in milliseconds as 8 bytes, big-endian. The separate domain keeps the two layouts
    /// apart: neither can be read as the other.
    public static func clientData(
        method: String, pathAndQuery: String, bodySHA256: [UInt8], timestampMilliseconds: Int64
    ) -> [UInt8] {
        RequestBindingLayout.clientData(
            method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256,
            timestampMilliseconds: timestampMilliseconds)
    }

    /// The longest method accepted in a binding, in bytes.
    public static let maximumMethodLength = RequestBindingLayout.maximumMethodLength
    /// The longest path and query accepted in a binding, in bytes.
    public static let maximumPathAndQueryLength = RequestBindingLayout.maximumPathAndQueryLength

    /// True when `method` is an HTTP method token (RFC 9110 `tchar`s) of at most ``maximumMethodLength`` bytes.
    public static func isValidMethod(_ method: String) -> Bool { RequestBindingLayout.isValidMethod(method) }

    /// True when `pathAndQuery` is an origin-form request target as it travels: it starts with `/`, holds only
    /// visible ASCII (no space, NUL or other control byte: anything else is percent-encoded) and has at most
    /// ``maximumPathAndQueryLength`` bytes.
    public static func isValidPathAndQuery(_ pathAndQuery: String) -> Bool {
        RequestBindingLayout.isValidPathAndQuery(pathAndQuery)
    }

    /// Base64URL without padding.
    package static func base64URL(_ bytes: [UInt8]) -> String { RequestBindingLayout.base64URL(bytes) }

    /// Decodes Base64URL (padding optional); nil for anything else or more than `limit` bytes.
    package static func decodeBase64URL(_ text: String, limit: Int = 4096) -> [UInt8]? {
        RequestBindingLayout.decodeBase64URL(text, limit: limit)
    }

    /// Decodes standard Base64; nil for anything else or more than `limit` bytes.
    package static func decodeBase64(_ text: String, limit: Int = 64 * 1024) -> [UInt8]? {
        RequestBindingLayout.decodeBase64(text, limit: limit)
    }
}
