internal import AppAttestCrypto
internal import AppAttestWire

/// The client data an assertion signs, in a layout that places the challenge, if any, where the service can check
/// it without searching (“Verifying assertions and counters”).
///
/// - ``request(method:pathAndQuery:bodySHA256:challenge:)``: the canonical binding of an HTTP request, what the app
///   hashes and passes to `generateAssertion`, so that an assertion is bound to one method, path, body and one-time
///   challenge and cannot be replayed against another request; the challenge is its last bytes:
///
///   ```
///   "app-attest-request-v1" ‖ 0x00 ‖ METHOD ‖ 0x00 ‖ path-and-query ‖ 0x00 ‖ SHA-256(body) (32 bytes) ‖ challenge
///   ```
///
///   The app side builds the same bytes with `AppAttestClient` (product `AppAttestClient`), from the request exactly
///   as it travels: the percent-encoded path, trailing slash kept, `?` and the percent-encoded query.
/// - ``request(method:pathAndQuery:bodySHA256:timestampMilliseconds:)``: the same request bound by a signed time
///   rather than a challenge.
/// - ``opaque(_:challenge:)``: the app's own bytes; a bound challenge must be their first bytes (`challenge ‖ payload`).
///
/// The service compares the challenge's bytes at that place, in time proportional to the challenge, and consumes it
/// once. A layout with the challenge somewhere inside arbitrary bytes is not accepted: finding it would cost time
/// proportional to the product of the two lengths, which a caller holding one valid assertion could spend again and
/// again.
public struct AppAttestClientData: Sendable, Hashable {
    /// The bytes the app hashed into the `clientDataHash` of `generateAssertion`.
    public let bytes: [UInt8]
    /// The challenge the client data binds, when it binds one.
    public let challenge: [UInt8]?
    /// Where ``challenge`` sits in ``bytes``.
    let challengeOffset: Int

    /// The largest challenge a binding may carry, in bytes; the service issues 32.
    public static let maximumChallengeLength = 64
    /// The largest opaque client data accepted, in bytes.
    public static let maximumOpaqueLength = 64 * 1024
    /// The first field of the canonical binding: names the binding and its version.
    public static let domain = RequestBindingLayout.domain
    /// The first field of the timestamped binding.
    public static let timestampedDomain = RequestBindingLayout.timestampedDomain

    private init(bytes: [UInt8], challenge: [UInt8]?, challengeOffset: Int) {
        self.bytes = bytes
        self.challenge = challenge
        self.challengeOffset = challengeOffset
    }

    /// The canonical binding of an HTTP request, with its one-time challenge.
    /// - Parameters:
    ///   - method: the request's method, e.g. `POST` (an HTTP token of at most 20 bytes).
    ///   - pathAndQuery: the request target as it travels: percent-encoded path, then `?` and the query, if any (at
    ///     most 8,192 bytes of visible ASCII).
    ///   - bodySHA256: SHA-256 of the body (of nothing for a request without one).
    ///   - challenge: the challenge bytes the server issued.
    /// - Throws: ``AppAttestError/Code/malformed`` when the method is not a token, the path and query is not a
    ///   visible-ASCII origin-form target, the body hash is not 32 bytes or the challenge is empty or longer than
    ///   ``maximumChallengeLength``.
    public static func request(method: String, pathAndQuery: String, bodySHA256: [UInt8], challenge: [UInt8])
        throws(AppAttestError) -> AppAttestClientData
    {
        try checkRequest(method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256)
        try checkChallenge(challenge)
        let bytes = RequestBindingLayout.clientData(
            method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256, challenge: challenge)
        return AppAttestClientData(bytes: bytes, challenge: challenge, challengeOffset: bytes.count - challenge.count)
    }

    /// The canonical binding of an HTTP request, given its body rather than the body's hash.
    /// - Throws: ``AppAttestError/Code/malformed`` as ``request(method:pathAndQuery:bodySHA256:challenge:)``.
    public static func request(
        method: String, pathAndQuery: String, body: some Collection<UInt8>, challenge: [UInt8]
    ) throws(AppAttestError) -> AppAttestClientData {
        try request(
            method: method, pathAndQuery: pathAndQuery, bodySHA256: SHA256.hash(Array(body)), challenge: challenge)
    }

    /// The canonical binding of an HTTP request with a signed timestamp instead of a challenge:
    /// `"app-attest-request-v1-time" ‖ 0x00 ‖ METHOD ‖ 0x00 ‖ path-and-query ‖ 0x00 ‖ SHA-256(body) ‖ milliseconds`,
    /// the last field the Unix time in milliseconds as 8 bytes, big-endian. The separate domain keeps the two layouts
    /// apart: neither can be read as the other. The caller checks that the timestamp is recent (the HTTP layer's
    /// timestamp freshness does); the counter makes each assertion single-use.
    /// - Throws: ``AppAttestError/Code/malformed`` as ``request(method:pathAndQuery:bodySHA256:challenge:)``.
    public static func request(
        method: String, pathAndQuery: String, bodySHA256: [UInt8], timestampMilliseconds: Int64
    ) throws(AppAttestError) -> AppAttestClientData {
        try checkRequest(method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256)
        let bytes = RequestBindingLayout.clientData(
            method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256,
            timestampMilliseconds: timestampMilliseconds)
        return AppAttestClientData(bytes: bytes, challenge: nil, challengeOffset: 0)
    }

    private static func checkRequest(method: String, pathAndQuery: String, bodySHA256: [UInt8])
        throws(AppAttestError)
    {
        guard RequestBindingLayout.isValidMethod(method) else {
            throw AppAttestError(.malformed, "the method is not an HTTP token of at most 20 bytes")
        }
        guard RequestBindingLayout.isValidPathAndQuery(pathAndQuery) else {
            throw AppAttestError(
                .malformed, "the path and query is not a visible-ASCII target of at most 8192 bytes")
        }
        guard bodySHA256.count == 32 else {
            throw AppAttestError(.malformed, "the body hash has \(bodySHA256.count) bytes, not 32")
        }
    }

    /// The app's own client data; a bound `challenge` must be its first bytes.
    ///
    /// Data that begins with either canonical binding's domain (``domain`` or ``timestampedDomain``, each followed by
    /// `0x00`) is refused: such an assertion was made
    /// for a bound request, and redeeming it as opaque data would skip what that binding checks (its challenge, its
    /// timestamp's freshness).
    /// - Throws: ``AppAttestError/Code/malformed`` when the data is longer than
    ///   ``maximumOpaqueLength``, begins with a canonical binding's domain, or the challenge is empty or longer than
    ///   ``maximumChallengeLength``.
    public static func opaque(_ bytes: [UInt8], challenge: [UInt8]? = nil) throws(AppAttestError)
        -> AppAttestClientData
    {
        guard bytes.count <= maximumOpaqueLength else {
            throw AppAttestError(.malformed, "client data of \(bytes.count) bytes exceeds 65536")
        }
        guard !canonicalDomains.contains(where: { bytes.starts(with: $0) }) else {
            throw AppAttestError(
                .malformed, "opaque client data begins with a canonical request binding's domain")
        }
        if let challenge { try checkChallenge(challenge) }
        return AppAttestClientData(bytes: bytes, challenge: challenge, challengeOffset: 0)
    }

    /// The first bytes of the two canonical layouts: a domain and its terminating `0x00`.
    private static let canonicalDomains: [[UInt8]] = [
        Array(RequestBindingLayout.domain.utf8) + [0], Array(RequestBindingLayout.timestampedDomain.utf8) + [0],
    ]

    private static func checkChallenge(_ challenge: [UInt8]) throws(AppAttestError) {
        guard !challenge.isEmpty, challenge.count <= maximumChallengeLength else {
            throw AppAttestError(
                .malformed, "a challenge of \(challenge.count) bytes (1 to \(maximumChallengeLength))")
        }
    }

    /// True when the bound challenge's bytes are at their place; constant time in the challenge's length.
    package var challengeIsInPlace: Bool {
        guard let challenge else { return true }
        guard challengeOffset >= 0, challengeOffset + challenge.count <= bytes.count else { return false }
        var difference: UInt8 = 0
        for index in 0..<challenge.count { difference |= bytes[challengeOffset + index] ^ challenge[index] }
        return difference == 0
    }
}
