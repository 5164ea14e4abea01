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

    var key: AppAttestStoredKey?
    var loaded = false
    var registration: Task<AppAttestStoredKey, any Error>?
    var challenges: [[UInt8]] = []
    var permits: Int
    var waiters: [CheckedContinuation<Void, Never>] = []
    var clockOffset: TimeInterval = 0

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
        let binding = try RequestParts(request)
        var repaired: Set<Repair> = []
        while true {
            let keyID = try await register()
            let challenge = try await proofChallenge(keyID: keyID)
            await acquire()
            let signed: URLRequest?
            do {
                signed = try await sign(request, binding, keyID: keyID, challenge: challenge, repaired: &repaired)
            } catch {
                release()
                throw error
            }
            guard let signed else {
                release()
                continue
            }
            let data: Data, response: HTTPURLResponse
            do {
                (data, response) = try await transport.send(signed)
            } catch {
                release()
                throw AppAttestClientError(.transport, "\(error)")
            }
            release()
            keepNextChallenge(from: response, keyID: keyID)
            guard let repair = Self.repair(for: response, data), repaired.insert(repair).inserted else {
                return (data, response)
            }
            try await apply(repair, keyID: keyID, response: response)
        }
    }

    // MARK: Concurrency

    func acquire() async {
        if permits > 0 {
            permits -= 1
            return
        }
        await withCheckedContinuation { continuation in waiters.append(continuation) }
    }

    func release() {
        if waiters.isEmpty { permits += 1 } else { waiters.removeFirst().resume() }
    }
}
