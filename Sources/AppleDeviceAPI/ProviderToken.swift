#if AppleServerAPI
public import Crypto
public import Foundation
import JWTKit

/// The developer credentials that sign provider tokens for DeviceCheck and the App Attest receipt endpoint
/// (“DeviceCheck's two bits”): a key with the DeviceCheck capability, its 10-character Key ID, and the 10-character
/// Team ID.
public struct ProviderCredentials: Sendable {
    /// The 10-character Team ID (`iss`).
    public let teamID: String
    /// The 10-character Key ID (`kid`).
    public let keyID: String
    /// The key from the `.p8` file.
    public let privateKey: P256.Signing.PrivateKey

    /// - Throws: ``AppleAPIError`` (`invalidCredentials`) when an identifier is not 10 letters or digits.
    public init(teamID: String, keyID: String, privateKey: P256.Signing.PrivateKey) throws(AppleAPIError) {
        for (name, value) in [("Team ID", teamID), ("Key ID", keyID)] {
            guard value.utf8.count == 10,
                value.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) })
            else {
                throw AppleAPIError(
                    .invalidCredentials, fault: .credentials, "\(name) must be 10 capital letters or digits")
            }
        }
        self.teamID = teamID
        self.keyID = keyID
        self.privateKey = privateKey
    }

    /// Loads the `.p8` file Apple issues: PEM `PRIVATE KEY` holding PKCS#8. A PKCS#8 body under an
    /// `EC PRIVATE KEY` label, or a SEC1 body under either label, is accepted too (“DeviceCheck's two bits”).
    /// - Throws: ``AppleAPIError`` (`invalidCredentials`).
    public init(teamID: String, keyID: String, p8 pem: String) throws(AppleAPIError) {
        guard pem.utf8.count <= 16 * 1024 else {
            throw AppleAPIError(.invalidCredentials, fault: .credentials, "the .p8 file is too large")
        }
        let body = pem.split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("-----") }
            .joined()
        guard pem.contains("-----BEGIN"), let der = Data(base64Encoded: body) else {
            throw AppleAPIError(.invalidCredentials, fault: .credentials, "not a PEM private key")
        }
        // swift-crypto's DER initialiser reads PKCS#8 and SEC1 alike, whatever the PEM label said.
        guard let key = try? P256.Signing.PrivateKey(derRepresentation: der) else {
            throw AppleAPIError(.invalidCredentials, fault: .credentials, "not a P-256 private key (PKCS#8 or SEC1)")
        }
        try self.init(teamID: teamID, keyID: keyID, privateKey: key)
    }
}

/// Makes and caches provider tokens: ES256 JWTs with header `{alg, kid}` and claims `{iss, iat}` (“DeviceCheck's two
/// bits”).
///
/// One token is reused until `renewAfter` (40 minutes by default: Apple rejects tokens older than an hour and
/// throttles renewals more often than every 20 minutes for APNs), then renewed. `iat` is whole seconds from the
/// injected clock and never in the future: if the clock moves back before a cached token's `iat`, a new token
/// is made.
public actor ProviderTokenSource {
    /// The credentials tokens are signed with.
    public let credentials: ProviderCredentials
    /// How long a token is reused before a new one is made, in seconds.
    public let renewAfter: TimeInterval
    private let now: @Sendable () -> Date
    private var cached: (token: String, issuedAt: Date)?
    private var keys: JWTKeyCollection?

    /// A token source; `now` is the clock (never sets `iat` in the future).
    public init(
        credentials: ProviderCredentials, renewAfter: TimeInterval = 40 * 60,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.credentials = credentials
        self.renewAfter = max(60, min(renewAfter, 55 * 60))
        self.now = now
    }

    /// A valid token, from the cache when it is young enough.
    public func token() async throws(AppleAPIError) -> String {
        let time = Date(timeIntervalSince1970: now().timeIntervalSince1970.rounded(.down))
        if let cached, cached.issuedAt <= time, time.timeIntervalSince(cached.issuedAt) < renewAfter {
            return cached.token
        }
        let token = try await sign(issuedAt: time)
        cached = (token, time)
        return token
    }

    /// Drops the cached token, for example after Apple answered that it expired.
    public func invalidate() { cached = nil }

    private func sign(issuedAt: Date) async throws(AppleAPIError) -> String {
        do {
            let keys: JWTKeyCollection
            if let existing = self.keys {
                keys = existing
            } else {
                keys = JWTKeyCollection()
                await keys.add(
                    ecdsa: try ES256PrivateKey(backing: credentials.privateKey),
                    kid: JWKIdentifier(string: credentials.keyID))
                self.keys = keys
            }
            var header = JWTHeader()
            header.alg = "ES256"
            header.kid = credentials.keyID
            header.typ = nil
            return try await keys.sign(
                ProviderClaims(iss: IssuerClaim(value: credentials.teamID), iat: IssuedAtClaim(value: issuedAt)),
                kid: JWKIdentifier(string: credentials.keyID), header: header)
        } catch {
            throw AppleAPIError(.invalidCredentials, fault: .credentials, "could not sign the provider token: \(error)")
        }
    }
}

/// The claims of a provider token.
struct ProviderClaims: JWTPayload, Equatable {
    var iss: IssuerClaim
    var iat: IssuedAtClaim

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
#endif  // AppleServerAPI
