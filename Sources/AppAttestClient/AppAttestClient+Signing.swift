internal import AppAttestWire
internal import Crypto
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension AppAttestClient {
    /// What the client data binds of a request, checked once before any key work.
    struct RequestParts {
        var method: String
        var pathAndQuery: String
        var bodySHA256: [UInt8]

        init(_ request: URLRequest) throws(AppAttestClientError) {
            guard let url = request.url, let pathAndQuery = AppAttestClient.pathAndQuery(of: url) else {
                throw AppAttestClientError(.unsupportedRequest, "the request has no absolute URL")
            }
            let method = (request.httpMethod ?? "GET").uppercased()
            guard RequestBindingLayout.isValidMethod(method) else {
                throw AppAttestClientError(.unsupportedRequest, "the method is not an HTTP token of at most 20 bytes")
            }
            guard RequestBindingLayout.isValidPathAndQuery(pathAndQuery) else {
                throw AppAttestClientError(
                    .unsupportedRequest, "the path and query is not a visible-ASCII target of at most 8192 bytes")
            }
            guard request.httpBodyStream == nil else {
                throw AppAttestClientError(.unsupportedRequest, "a streamed body cannot be hashed; set httpBody")
            }
            self.method = method
            self.pathAndQuery = pathAndQuery
            self.bodySHA256 = Array(SHA256.hash(data: request.httpBody ?? Data()))
        }
    }

    /// The challenge that proves this request fresh, in the configured mode; nil in timestamp mode.
    func proofChallenge(keyID: String) async throws(AppAttestClientError) -> [UInt8]? {
        switch configuration.freshness.mode {
        case .challenge: return try await fetchChallenge(purpose: "assertion", keyID: keyID)
        case .nextChallenge:
            // The newest first. One kept longer than `nextChallengeLifetime` may be gone from the server (expired,
            // then purged), which answers it as unknown, as it answers a used one: a POST refused so could not be
            // sent again. It goes, and with it every older one.
            if let stale = challenges.lastIndex(where: { !isFresh($0.received) }) {
                challenges.removeSubrange(...stale)
            }
            if let pooled = challenges.popLast() { return pooled.bytes }
            return try await fetchChallenge(purpose: "assertion", keyID: keyID)
        case .timestamp: return nil
        }
    }

    /// `request` with the key's assertion over its binding in the header fields; nil when the key failed on the device
    /// and was discarded, so that the caller registers a new one (once per request).
    func sign(
        _ request: URLRequest, _ parts: RequestParts, keyID: String, challenge: [UInt8]?, ticket: Int,
        attempt: inout RequestAttempt
    ) async throws(AppAttestClientError) -> URLRequest? {
        // The turn to sign first: a timestamp read before a wait for it would be old when sent, and the key may have
        // been reset or replaced meanwhile (a sign-out): then nothing is signed with it, and the caller takes the
        // current key.
        try await beginSigning(ticket)
        guard key?.keyID == keyID else {
            endSigning(ticket, signed: false)
            return nil
        }
        var signed = request
        let clientData: [UInt8]
        if let challenge {
            clientData = RequestBindingLayout.clientData(
                method: parts.method, pathAndQuery: parts.pathAndQuery, bodySHA256: parts.bodySHA256,
                challenge: challenge)
            signed.setValue(
                RequestBindingLayout.base64URL(challenge), forHTTPHeaderField: RequestBindingHeaders.challenge)
        } else {
            let milliseconds = Int64(((configuration.now().timeIntervalSince1970 + clockOffset) * 1000).rounded())
            clientData = RequestBindingLayout.clientData(
                method: parts.method, pathAndQuery: parts.pathAndQuery, bodySHA256: parts.bodySHA256,
                timestampMilliseconds: milliseconds)
            signed.setValue(String(milliseconds), forHTTPHeaderField: RequestBindingHeaders.timestamp)
        }
        let assertion: Data
        do {
            assertion = try await keyProvider.generateAssertion(
                keyID, clientDataHash: Data(SHA256.hash(data: clientData)))
            endSigning(ticket, signed: true)
        } catch {
            endSigning(ticket, signed: false)
            let providerError = Self.providerError(error)
            // A key that fails on the device would fail forever (its keyId outlives the app in the Keychain): a new
            // one, once per request and within the day's replacements.
            guard Self.keyDiscardingProviderCodes.contains(providerError.code), !attempt.replacedKey else {
                throw AppAttestClientError(
                    .keyProvider, "generateAssertion failed: \(providerError)", providerCode: providerError.code)
            }
            attempt.replacedKey = true
            do { try await replaceKey(keyID, reason: providerError.code.name) } catch { throw published(error) }
            return nil
        }
        signed.setValue(keyID, forHTTPHeaderField: RequestBindingHeaders.keyID)
        signed.setValue(assertion.base64EncodedString(), forHTTPHeaderField: RequestBindingHeaders.assertion)
        return signed
    }

    /// Whether a challenge that came at `received` is still within
    /// ``AppAttestClientConfiguration/nextChallengeLifetime`` (on a clock that goes on while the device sleeps), so
    /// that the server still has it.
    func isFresh(_ received: ContinuousClock.Instant) -> Bool {
        ContinuousClock.now - received <= Duration.seconds(Self.boundedWait(configuration.nextChallengeLifetime))
    }

    /// Keeps the next challenge an answer carries, for a later request of the same key.
    func keepNextChallenge(from response: HTTPURLResponse, keyID: String) {
        guard configuration.freshness.mode == .nextChallenge, key?.keyID == keyID,
            let text = response.value(forHTTPHeaderField: RequestBindingHeaders.nextChallenge),
            let next = RequestBindingLayout.decodeBase64URL(text, limit: 64), !next.isEmpty
        else { return }
        challenges.append(PooledChallenge(bytes: next, received: .now))
        if challenges.count > Self.maximumPooledChallenges { challenges.removeFirst() }
    }

    // MARK: The binding

    /// The request target as it travels: the percent-encoded path (`/` when empty, trailing slash kept), then `?`
    /// and the percent-encoded query when the URL has one. `URL.path` would be wrong: it is percent-decoded and
    /// drops a trailing slash.
    static func pathAndQuery(of url: URL) -> String? {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: true), components.host != nil
        else { return nil }
        var target = components.percentEncodedPath
        if target.isEmpty { target = "/" }
        if let query = components.percentEncodedQuery { target += "?" + query }
        return target
    }
}
