internal import AppAttestWire
internal import Crypto
public import Foundation

#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

/// The app side of App Attest: it makes and registers the app's key once, then signs each protected request so
/// that the server's middleware (Hummingbird, Vapor, or a backend calling `appattest serve`) accepts it
/// (“Protecting your app's requests”).
///
/// ```swift
/// let client = AppAttestClient(
///     configuration: .init(baseURL: URL(string: "https://api.example.com")!, freshness: .nextChallengeInResponse),
///     keyProvider: DeviceCheckKeyProvider(), keyStorage: KeychainKeyStorage())
/// var request = URLRequest(url: URL(string: "https://api.example.com/api/orders")!)
/// request.httpMethod = "POST"
/// request.httpBody = order
/// let (data, response) = try await client.data(for: request)
/// ```
///
/// What it takes care of:
/// - **The key's lifecycle.** The keyId is generated once and kept in the ``AppAttestKeyStorage``; the key is
///   attested against a fresh challenge and registered. When the key stops working (`invalidKey` after a reinstall
///   or restore, or the server no longer knows it) the client makes and registers a new one and retries the request
///   once. Apple's `serverUnavailable` and an unavailable server are retried with exponential backoff.
///   `featureUnsupported` is a typed outcome (``AppAttestClientError/Code/featureUnsupported``).
/// - **The binding.** The client data is built from the request exactly as it travels: method, the percent-encoded
///   path with its trailing slash, `?` and the percent-encoded query, and the SHA-256 of the body.
/// - **Freshness** in the mode of ``AppAttestClientFreshness``, and **concurrency** that never produces refusals
///   (``AppAttestClientConcurrency``).
///
/// A request the server's App Attest layer refused for a reason the client can repair (a challenge that expired, a
/// key the server no longer knows, a counter that arrived late, a clock that is off) is repaired and sent once more:
/// such a refusal happens before your route runs, so the retry cannot run it twice.
public actor AppAttestClient {
    /// Where the client registers and how it behaves.
    public let configuration: AppAttestClientConfiguration
    /// Makes and uses the key.
    public let keyProvider: any AppAttestKeyProvider
    /// Keeps the keyId across launches.
    public let keyStorage: any AppAttestKeyStorage
    /// Sends the requests.
    public let transport: any AppAttestClientTransport

    private var key: AppAttestStoredKey?
    private var loaded = false
    private var registration: Task<AppAttestStoredKey, any Error>?
    private var challenges: [[UInt8]] = []
    private var permits: Int
    private var waiters: [CheckedContinuation<Void, Never>] = []
    private var clockOffset: TimeInterval = 0

    /// The most next challenges kept for later requests.
    static let maximumPooledChallenges = 16
    /// The largest answer read from the challenge and attestation routes, in bytes.
    static let maximumRegistrationResponseSize = 64 * 1024

    /// A client with its collaborators.
    public init(
        configuration: AppAttestClientConfiguration, keyProvider: any AppAttestKeyProvider,
        keyStorage: any AppAttestKeyStorage = MemoryKeyStorage(),
        transport: any AppAttestClientTransport = URLSessionClientTransport()
    ) {
        self.configuration = configuration
        self.keyProvider = keyProvider
        self.keyStorage = keyStorage
        self.transport = transport
        self.permits = configuration.concurrency.maximumInFlight
    }

    /// True when the device can attest keys.
    public var isSupported: Bool {
        get async { await keyProvider.isSupported }
    }

    /// The registered key's keyId, if there is one.
    public var registeredKeyID: String? {
        get async {
            _ = try? await storedKey()
            return key?.registered == true ? key?.keyID : nil
        }
    }

    /// Makes and registers the app's key unless a registered one is stored; returns its keyId. Concurrent calls
    /// share one registration.
    public func register() async throws(AppAttestClientError) -> String {
        if let stored = try await storedKey(), stored.registered { return stored.keyID }
        let task: Task<AppAttestStoredKey, any Error>
        if let registration {
            task = registration
        } else {
            task = Task { try await self.performRegistration() }
            registration = task
        }
        do {
            let registered = try await task.value
            if registration == task { registration = nil }
            return registered.keyID
        } catch {
            if registration == task { registration = nil }
            throw Self.clientError(error)
        }
    }

    /// Forgets the key (for example when the user signs out); the next request registers a new one.
    public func resetKey() async throws(AppAttestClientError) {
        key = nil
        loaded = true
        challenges.removeAll()
        do { try await keyStorage.remove() } catch { throw AppAttestClientError(.storage, "\(error)") }
    }

    /// Signs `request` with an assertion of the app's key (registering it first if needed), sends it through the
    /// transport, and returns the answer, whatever its status.
    /// - Throws: ``AppAttestClientError`` when the request cannot be signed or sent, or the key cannot be
    ///   registered; never for an answer from your route.
    public func data(for request: URLRequest) async throws(AppAttestClientError) -> (Data, HTTPURLResponse) {
        guard let url = request.url, let pathAndQuery = Self.pathAndQuery(of: url) else {
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
        let bodySHA256 = Array(SHA256.hash(data: request.httpBody ?? Data()))
        var repaired: Set<String> = []
        while true {
            let keyID = try await register()
            var challenge: [UInt8]?
            switch configuration.freshness.mode {
            case .challenge: challenge = try await fetchChallenge(purpose: "assertion", keyID: keyID)
            case .nextChallenge:
                challenge = challenges.popLast()
                if challenge == nil { challenge = try await fetchChallenge(purpose: "assertion", keyID: keyID) }
            case .timestamp: challenge = nil
            }
            await acquire()
            let clientData: [UInt8]
            var signed = request
            if let challenge {
                clientData = RequestBindingLayout.clientData(
                    method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256, challenge: challenge)
                signed.setValue(
                    RequestBindingLayout.base64URL(challenge), forHTTPHeaderField: RequestBindingHeaders.challenge)
            } else {
                let milliseconds = Int64(((configuration.now().timeIntervalSince1970 + clockOffset) * 1000).rounded())
                clientData = RequestBindingLayout.clientData(
                    method: method, pathAndQuery: pathAndQuery, bodySHA256: bodySHA256,
                    timestampMilliseconds: milliseconds)
                signed.setValue(String(milliseconds), forHTTPHeaderField: RequestBindingHeaders.timestamp)
            }
            let assertion: Data
            do {
                assertion = try await keyProvider.generateAssertion(
                    keyID, clientDataHash: Data(SHA256.hash(data: clientData)))
            } catch {
                release()
                let providerError = Self.providerError(error)
                guard providerError.code == .invalidKey, repaired.insert("key").inserted else {
                    throw AppAttestClientError(
                        .keyProvider, "generateAssertion failed: \(providerError)", providerCode: providerError.code)
                }
                try await forget(keyID)
                continue
            }
            signed.setValue(keyID, forHTTPHeaderField: RequestBindingHeaders.keyID)
            signed.setValue(assertion.base64EncodedString(), forHTTPHeaderField: RequestBindingHeaders.assertion)
            let data: Data, response: HTTPURLResponse
            do {
                (data, response) = try await transport.send(signed)
            } catch {
                release()
                throw AppAttestClientError(.transport, "\(error)")
            }
            release()
            if configuration.freshness.mode == .nextChallenge, key?.keyID == keyID,
                let text = response.value(forHTTPHeaderField: RequestBindingHeaders.nextChallenge),
                let next = RequestBindingLayout.decodeBase64URL(text, limit: 64), !next.isEmpty
            {
                challenges.append(next)
                if challenges.count > Self.maximumPooledChallenges { challenges.removeFirst() }
            }
            guard let repair = Self.repair(for: response, data), repaired.insert(repair.rawValue).inserted else {
                return (data, response)
            }
            switch repair {
            case .key: try await forget(keyID)
            case .challenge: challenges.removeAll()
            case .counter: break
            case .clock:
                if let serverDate = Self.date(response) {
                    clockOffset = serverDate.timeIntervalSince(configuration.now())
                }
            }
        }
    }

    // MARK: Repairs

    enum Repair: String {
        case key, challenge, counter, clock
    }

    /// What the client can repair of a refusal by the server's App Attest layer (a problem document with one of its
    /// codes, before any route ran); nil for any other answer.
    static func repair(for response: HTTPURLResponse, _ data: Data) -> Repair? {
        guard [401, 404, 409].contains(response.statusCode),
            response.value(forHTTPHeaderField: "Content-Type")?.hasPrefix("application/problem+json") == true,
            data.count <= 16 * 1024,
            let problem = try? JSONDecoder().decode(Problem.self, from: data)
        else { return nil }
        switch problem.code {
        case "unknownKey", "keyRevoked": return .key
        case "challengeUnknown", "challengeExpired", "challengeMismatch": return .challenge
        case "counterNotIncreasing", "counterReplayed": return .counter
        case "staleTimestamp": return .clock
        default: return nil
        }
    }

    struct Problem: Decodable {
        var code: String
        var status: Int?
    }

    static func date(_ response: HTTPURLResponse) -> Date? {
        guard let text = response.value(forHTTPHeaderField: "Date") else { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text)
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

    // MARK: Concurrency

    private func acquire() async {
        if permits > 0 {
            permits -= 1
            return
        }
        await withCheckedContinuation { continuation in waiters.append(continuation) }
    }

    private func release() {
        if waiters.isEmpty { permits += 1 } else { waiters.removeFirst().resume() }
    }

    // MARK: Registration

    private func storedKey() async throws(AppAttestClientError) -> AppAttestStoredKey? {
        if !loaded {
            do { key = try await keyStorage.load() } catch { throw AppAttestClientError(.storage, "\(error)") }
            loaded = true
        }
        return key
    }

    private func save(_ stored: AppAttestStoredKey?) async throws(AppAttestClientError) {
        key = stored
        do {
            if let stored { try await keyStorage.save(stored) } else { try await keyStorage.remove() }
        } catch {
            throw AppAttestClientError(.storage, "\(error)")
        }
    }

    /// Drops `keyID` if it is still the current key, so that the next request registers a new one.
    private func forget(_ keyID: String) async throws(AppAttestClientError) {
        guard key?.keyID == keyID else { return }
        challenges.removeAll()
        try await save(nil)
    }

    private func performRegistration() async throws(AppAttestClientError) -> AppAttestStoredKey {
        guard await keyProvider.isSupported else {
            throw AppAttestClientError(
                .featureUnsupported, "App Attest is not supported on this device", providerCode: .featureUnsupported)
        }
        var keyID = try await storedKey()?.keyID
        var lastError = AppAttestClientError(.transport, "no attempt was made")
        for attempt in 0..<max(configuration.maximumRegistrationAttempts, 1) {
            if attempt > 0 { try await backoff(attempt) }
            do {
                if keyID == nil {
                    let generated = try await provider { try await keyProvider.generateKey() }
                    try await save(AppAttestStoredKey(keyID: generated, registered: false))
                    keyID = generated
                }
                guard let current = keyID else { continue }
                let challenge = try await fetchChallenge(purpose: "attestation", keyID: nil)
                let object = try await provider {
                    try await keyProvider.attestKey(current, clientDataHash: Data(SHA256.hash(data: challenge)))
                }
                try await postAttestation(keyID: current, object: object, challenge: challenge)
                let registered = AppAttestStoredKey(keyID: current, registered: true)
                challenges.removeAll()
                try await save(registered)
                return registered
            } catch {
                lastError = error
                switch Self.registrationRecovery(error) {
                case .newKey:
                    // The key cannot be attested (already attested, or gone): a new one.
                    if let current = keyID { try await forget(current) }
                    keyID = nil
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

    private func backoff(_ attempt: Int) async throws(AppAttestClientError) {
        let delay = min(configuration.initialRetryDelay * pow(2, Double(attempt - 1)), configuration.maximumRetryDelay)
        // Full jitter, so that many apps that failed together do not come back together.
        let seconds = Double.random(in: (delay / 2)...max(delay, delay / 2))
        do { try await Task.sleep(nanoseconds: UInt64(max(seconds, 0) * 1_000_000_000)) } catch {
            throw AppAttestClientError(.transport, "cancelled")
        }
    }

    private func provider<T>(_ body: () async throws -> T) async throws(AppAttestClientError) -> T {
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

    private func fetchChallenge(purpose: String, keyID: String?) async throws(AppAttestClientError) -> [UInt8] {
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

    private func postAttestation(keyID: String, object: Data, challenge: [UInt8]) async throws(AppAttestClientError) {
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

    private func postJSON<Answer: Decodable>(_ url: URL, _ body: some Encodable, what: String)
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
                status: response.statusCode, problemCode: problem?.code)
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
