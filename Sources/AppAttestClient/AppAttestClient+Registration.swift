internal import AppAttestWire
internal import Crypto
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension AppAttestClient {
    // MARK: Registration

    func storedKey() async throws(AppAttestClientError) -> AppAttestStoredKey? {
        if !loaded {
            do { key = try await keyStorage.load() } catch { throw AppAttestClientError(.storage, "\(error)") }
            loaded = true
        }
        return key
    }

    func save(_ stored: AppAttestStoredKey?) async throws(AppAttestClientError) {
        key = stored
        do {
            if let stored { try await keyStorage.save(stored) } else { try await keyStorage.remove() }
        } catch {
            throw AppAttestClientError(.storage, "\(error)")
        }
    }

    /// Drops `keyID` if it is still the current key, so that the next request registers a new one.
    func forget(_ keyID: String) async throws(AppAttestClientError) {
        guard key?.keyID == keyID else { return }
        challenges.removeAll()
        try await save(nil)
    }

    func performRegistration() async throws(AppAttestClientError) -> AppAttestStoredKey {
        guard await keyProvider.isSupported else {
            throw AppAttestClientError(
                .featureUnsupported, "App Attest is not supported on this device", providerCode: .featureUnsupported)
        }
        var keyID = try await storedKey()?.keyID
        // A key is attested once: its object is posted again (same key, same challenge) until the server answers.
        var attestation: (keyID: String, object: Data, challenge: [UInt8])?
        var lastError = AppAttestClientError(.transport, "no attempt was made")
        for attempt in 0..<max(configuration.maximumRegistrationAttempts, 1) {
            if attempt > 0 { try await backoff(attempt, after: lastError) }
            do {
                if keyID == nil {
                    let generated = try await provider { try await keyProvider.generateKey() }
                    try await save(AppAttestStoredKey(keyID: generated, registered: false))
                    keyID = generated
                }
                guard let current = keyID else { continue }
                if attestation?.keyID != current {
                    let challenge = try await fetchChallenge(purpose: "attestation", keyID: nil)
                    let object = try await provider {
                        try await keyProvider.attestKey(current, clientDataHash: Data(SHA256.hash(data: challenge)))
                    }
                    attestation = (current, object, challenge)
                }
                guard let (_, object, challenge) = attestation else { continue }
                try await postAttestation(keyID: current, object: object, challenge: challenge)
                let registered = AppAttestStoredKey(keyID: current, registered: true)
                challenges.removeAll()
                try await save(registered)
                return registered
            } catch {
                lastError = error
                var recovery = Self.registrationRecovery(error)
                if attestation != nil, error.code == .registrationRefused,
                    ["challengeUnknown", "challengeExpired"].contains(error.problemCode)
                {
                    // The object's challenge is gone and the key cannot be attested again: a new key.
                    recovery = .newKey
                }
                switch recovery {
                case .newKey:
                    // The key cannot be attested (already attested, or gone): a new one.
                    if let current = keyID { try await forget(current) }
                    keyID = nil
                    attestation = nil
                case .retry: continue
                case .none: throw error
                }
            }
        }
        throw lastError
    }

    enum RegistrationRecovery {
        case newKey, retry
    }

    /// How a failed registration attempt can recover: a new key after `invalidKey`, another attempt when Apple or
    /// the server is unavailable; nil when it cannot.
    static func registrationRecovery(_ error: AppAttestClientError) -> RegistrationRecovery? {
        if error.code == .keyProvider, error.providerCode == .invalidKey { return .newKey }
        if error.code == .keyProvider, error.providerCode == .serverUnavailable { return .retry }
        if error.code == .transport { return .retry }
        if error.code == .registrationRefused, let status = error.status, status >= 500 || status == 429 {
            return .retry
        }
        return nil
    }

    /// Waits before attempt `attempt`: the server's `Retry-After` when the last refusal had one (a deferral when it
    /// is longer than ``AppAttestClientConfiguration/maximumRetryDelay``), exponential backoff otherwise.
    func backoff(_ attempt: Int, after error: AppAttestClientError) async throws(AppAttestClientError) {
        if let until = error.retryAfter {
            let wait = until.timeIntervalSince(configuration.now())
            guard wait <= configuration.maximumRetryDelay else {
                throw AppAttestClientError(
                    .deferred, "the server asked to wait \(Int(wait)) s", status: error.status,
                    problemCode: error.problemCode, action: error.action, retryAfter: until)
            }
            return try await Self.sleep(seconds: wait)
        }
        let delay = min(configuration.initialRetryDelay * pow(2, Double(attempt - 1)), configuration.maximumRetryDelay)
        // Full jitter, so that many apps that failed together do not come back together.
        try await Self.sleep(seconds: Double.random(in: (delay / 2)...max(delay, delay / 2)))
    }

    func provider<T>(_ body: () async throws -> T) async throws(AppAttestClientError) -> T {
        do {
            return try await body()
        } catch {
            let providerError = Self.providerError(error)
            if providerError.code == .featureUnsupported {
                throw AppAttestClientError(
                    .featureUnsupported, providerError.description, providerCode: providerError.code)
            }
            throw AppAttestClientError(.keyProvider, providerError.description, providerCode: providerError.code)
        }
    }

    func fetchChallenge(purpose: String, keyID: String?) async throws(AppAttestClientError) -> [UInt8] {
        struct Body: Encodable {
            var purpose: String
            var keyId: String?
        }
        struct Answer: Decodable { var challenge: String }
        let answer: Answer = try await postJSON(
            configuration.challengeURL, Body(purpose: purpose, keyId: keyID), what: "challenge")
        guard let challenge = RequestBindingLayout.decodeBase64URL(answer.challenge, limit: 64), !challenge.isEmpty
        else { throw AppAttestClientError(.transport, "the challenge is not Base64URL of 1 to 64 bytes") }
        return challenge
    }

    func postAttestation(keyID: String, object: Data, challenge: [UInt8]) async throws(AppAttestClientError) {
        struct Body: Encodable {
            var keyId: String
            var attestationObject: String
            var challenge: String
        }
        struct Answer: Decodable {}
        do {
            let _: Answer = try await postJSON(
                configuration.attestationURL,
                Body(
                    keyId: keyID, attestationObject: object.base64EncodedString(),
                    challenge: RequestBindingLayout.base64URL(challenge)), what: "attestation")
        } catch  where error.problemCode == "keyAlreadyRegistered" {
            // An earlier attempt registered it and its answer was lost: the key is this device's.
            return
        }
    }

    func postJSON<Answer: Decodable>(_ url: URL, _ body: some Encodable, what: String)
        async throws(AppAttestClientError) -> Answer
    {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        let data: Data, response: HTTPURLResponse
        do {
            request.httpBody = try JSONEncoder().encode(body)
            request = try await configuration.prepareRegistrationRequest(request)
            (data, response) = try await transport.send(request)
        } catch {
            throw AppAttestClientError(.transport, "\(what): \(error)")
        }
        guard data.count <= Self.maximumRegistrationResponseSize else {
            throw AppAttestClientError(
                .transport, "\(what): an answer of \(data.count) bytes", status: response.statusCode)
        }
        guard (200..<300).contains(response.statusCode) else {
            let problem = try? JSONDecoder().decode(Problem.self, from: data)
            throw AppAttestClientError(
                .registrationRefused, "\(what) refused with status \(response.statusCode)",
                status: response.statusCode, problemCode: problem?.code, action: problem?.action,
                retryAfter: Self.retryAfter(response).map { configuration.now().addingTimeInterval($0) })
        }
        do {
            return try JSONDecoder().decode(Answer.self, from: data)
        } catch {
            throw AppAttestClientError(.transport, "\(what): the answer is not the expected JSON")
        }
    }

    static func providerError(_ error: any Error) -> AppAttestKeyProviderError {
        (error as? AppAttestKeyProviderError) ?? AppAttestKeyProviderError(.unknownSystemFailure, "\(error)")
    }

    static func clientError(_ error: any Error) -> AppAttestClientError {
        if let error = error as? AppAttestClientError { return error }
        if error is CancellationError { return AppAttestClientError(.transport, "cancelled") }
        return AppAttestClientError(.transport, "\(error)")
    }
}
