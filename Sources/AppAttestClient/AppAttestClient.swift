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
///   attested against a fresh challenge and registered. When the key stops working (`invalidKey`, `invalidInput` or
///   `unknownSystemFailure` on the device, for example after a restore, or a server that no longer knows it) the
///   client makes and registers a new one and retries the request once, at most
///   ``AppAttestClientConfiguration/maximumKeyReplacementsPerDay`` times a day. A key the server revoked is not
///   replaced unless ``AppAttestClientConfiguration/reattestsRevokedKeys`` says so. Apple's `serverUnavailable` and an unavailable server are retried with exponential backoff.
///   `featureUnsupported` is a typed outcome (``AppAttestClientError/Code/featureUnsupported``).
/// - **The binding.** The client data is built from the request exactly as it travels: method, the percent-encoded
///   path with its trailing slash, `?` and the percent-encoded query, and the SHA-256 of the body.
/// - **Freshness** in the mode of ``AppAttestClientFreshness``, and **concurrency** that never produces refusals
///   (``AppAttestClientConcurrency``).
///
/// A request the server's App Attest layer refused is handled as the refusal's `action` says (see
/// ``data(for:isIdempotent:)``): a request whose method is not idempotent is never sent again after a refusal that a
/// second delivery of an accepted request would also get, so a POST never runs twice; refusals the client cannot
/// repair are thrown as typed errors, never returned as a 401 that an app could take for a logout.
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
    /// The first load of the storage, shared by the calls that arrive while it runs.
    var loading: Task<AppAttestStoredKey?, any Error>?
    var registration: Task<AppAttestStoredKey, any Error>?
    /// Callers waiting for the registration of a key generation.
    var registrationWaiters:
        [(
            id: Int, generation: Int,
            continuation: CheckedContinuation<Result<AppAttestStoredKey, AppAttestClientError>, Never>
        )] = []
    /// The last storage write started: the next one runs after it.
    var lastWrite: Task<Result<Void, AppAttestClientError>, Never>?
    /// Incremented by ``resetKey()``: a registration started before a reset saves nothing after it.
    var keyGeneration = 0
    /// The attestation challenge of the registration under way, or of one that ran out of attempts, for the next one
    /// with the same key (Apple asks for the same clientDataHash after `serverUnavailable`).
    var keptAttestationChallenge: (keyID: String, challenge: [UInt8], received: ContinuousClock.Instant)?
    /// The next challenges answers carried (``AppAttestClientFreshness/nextChallengeInResponse``), oldest first.
    var challenges: [PooledChallenge] = []
    /// A next challenge, and when its answer came (a clock that goes on while the device sleeps).
    struct PooledChallenge {
        var bytes: [UInt8]
        var received: ContinuousClock.Instant
    }
    /// Requests that may still start now (see ``AppAttestClientConcurrency``).
    var permits: Int
    /// The spread of counters the server accepts in any order (1: strictly increasing).
    let counterWindow: Int
    /// The sequence number of the next signature: the key's counter, give or take a constant, since every signature
    /// of the key is this client's.
    var nextSequence = 0
    /// The sequence numbers of the signatures of requests not yet answered, by ticket.
    var unanswered: [Int: Int] = [:]
    /// Whether a signature is being made.
    var signing = false
    var lastTicket = 0
    /// The tickets admitted and not yet released.
    var admitted: Set<Int> = []
    var waiters: [(id: Int, continuation: CheckedContinuation<Void, Never>)] = []
    var lastWaiter = 0
    var clockOffset: TimeInterval = 0
    /// The attestation budget's state, stored with the key.
    var history = AppAttestStoredKey.History()
    /// The keyId stored as discarded, beside which the history is kept while there is no current key.
    var discardedKeyID: String?
    /// The deferral thrown when the server's App Attest layer asked for a wait too long to take within a request: no
    /// request is signed or key registered before its time (``checkServerDeferral()``).
    var keptDeferral: KeptDeferral?
    /// The time of the attestation budget's deferral last published as an event (``publishedOnce(_:)``).
    var publishedBudgetDeferral: Date?

    /// The challenges reserved for one key that the servers keep unused by default (`perKey`): the most requests
    /// that fetch or hold a challenge at once.
    static let maximumOutstandingChallenges = 16
    /// The most next challenges kept for later requests.
    static let maximumPooledChallenges = 16
    /// The largest answer read from the challenge and attestation routes, in bytes.
    static let maximumRegistrationResponseSize = 64 * 1024

    /// The lifecycle of the key and the answers to the app's requests, as they happen (``AppAttestClientEvent``): read
    /// it to log or count them. The most recent 256 are kept for a reader that is behind.
    public nonisolated let events: AsyncStream<AppAttestClientEvent>
    let eventContinuation: AsyncStream<AppAttestClientEvent>.Continuation

    /// A client with its collaborators.
    public init(
        configuration: AppAttestClientConfiguration, keyProvider: any AppAttestKeyProvider,
        keyStorage: any AppAttestKeyStorage = AppAttestClient.defaultKeyStorage(),
        transport: any AppAttestClientTransport = URLSessionClientTransport()
    ) {
        self.configuration = configuration
        self.keyProvider = keyProvider
        self.keyStorage = keyStorage
        self.transport = transport
        (events, eventContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(Self.eventBuffer))
        let window = configuration.concurrency.maximumInFlight
        self.counterWindow = window
        // Each request in flight may hold a challenge reserved for the key: never more than the server keeps.
        self.permits =
            configuration.freshness == .timestamp ? window : min(window, Self.maximumOutstandingChallenges)
    }

    /// Where the key is kept unless you say otherwise: the app's Keychain item on Apple platforms
    /// (`KeychainKeyStorage()`), memory elsewhere (where the client runs for tests).
    public static func defaultKeyStorage() -> any AppAttestKeyStorage {
        #if canImport(Security)
        KeychainKeyStorage()
        #else
        MemoryKeyStorage()
        #endif
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
        guard !Task.isCancelled else { throw AppAttestClientError(.transport, "cancelled") }
        try checkServerDeferral()
        let generation = keyGeneration
        if registration == nil {
            registration = Task {
                let result: Result<AppAttestStoredKey, AppAttestClientError>
                do { result = .success(try await self.performRegistration()) } catch {
                    result = .failure(Self.clientError(error))
                }
                self.registrationEnded(result, generation: generation)
                return try result.get()
            }
        }
        // Each caller waits on its own, cancellably: the registration goes on for the others.
        lastWaiter += 1
        let id = lastWaiter
        let result: Result<AppAttestStoredKey, AppAttestClientError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                if Task.isCancelled {
                    continuation.resume(returning: .failure(AppAttestClientError(.transport, "cancelled")))
                } else {
                    registrationWaiters.append((id, generation, continuation))
                }
            }
        } onCancel: {
            Task { await self.stopWaitingForRegistration(id) }
        }
        return try result.get().keyID
    }

    /// The registration ended: its waiters hear the outcome.
    func registrationEnded(_ result: Result<AppAttestStoredKey, AppAttestClientError>, generation: Int) {
        if keyGeneration == generation { registration = nil }
        let waiting = registrationWaiters.filter { $0.generation == generation }
        registrationWaiters.removeAll { $0.generation == generation }
        for waiter in waiting { waiter.continuation.resume(returning: result) }
    }

    /// A waiter whose task was cancelled stops waiting.
    func stopWaitingForRegistration(_ id: Int) {
        guard let index = registrationWaiters.firstIndex(where: { $0.id == id }) else { return }
        registrationWaiters.remove(at: index).continuation.resume(
            returning: .failure(AppAttestClientError(.transport, "cancelled")))
    }

    /// Forgets the key (for example when the user signs out), cancelling a registration in flight; the next request
    /// registers a new one.
    public func resetKey() async throws(AppAttestClientError) {
        // A registration in flight is cancelled, and whatever it still finishes is not saved over the reset.
        registration?.cancel()
        registration = nil
        keyGeneration += 1
        let current = try await storedKey()?.keyID
        if let current { emit(AppAttestClientEvent(.keyReset, keyID: current, code: "reset")) }
        challenges.removeAll()
        // The history stays: a reset is the app's choice, but Apple's budget is the same. With no current key, beside
        // the last discarded one (else the storage would be emptied, and a relaunch would forget every wait).
        try await saveNoKey(last: current ?? discardedKeyID)
    }

    /// Signs `request` with an assertion of the app's key (registering it first if needed), sends it through the
    /// transport, and returns the answer of your route, whatever its status.
    ///
    /// A refusal by the server's App Attest layer (a problem document, before your route ran) is handled as its
    /// `action` says: `retry` waits for `Retry-After` (and a random share more) and sends again, or throws
    /// ``AppAttestClientError/Code/deferred`` when that wait is longer than
    /// ``AppAttestClientConfiguration/maximumRetryDelay``. A request that may run twice is signed again; one that
    /// may not is sent again exactly as signed, holding its turn while it waits, because the `retry` may have been a
    /// second delivery's answer (a proxy's retry) while the first ran: the server then refuses the same assertion as
    /// a replay, and the call throws ``AppAttestClientError/Code/requestMayHaveRun``. `reattest` replaces the key
    /// and sends again;
    /// `refetchChallenge` signs again with a new challenge, counter or timestamp, but only a request that may run
    /// twice, because a second delivery of an accepted request gets the same refusal. Each repair happens at most
    /// once per call; anything else is thrown.
    /// - Parameters:
    ///   - request: the request, with its body in `httpBody`.
    ///   - isIdempotent: whether the request may run twice; nil takes it from the method (GET, HEAD, PUT, DELETE,
    ///     OPTIONS and TRACE may). Pass `false` for a PUT or DELETE of yours that is not idempotent.
    /// - Throws: ``AppAttestClientError`` when the request cannot be signed or sent, the key cannot be registered,
    ///   or the App Attest layer refused it (``AppAttestClientError/Code/requestRefused``,
    ///   ``AppAttestClientError/Code/requestMayHaveRun``, ``AppAttestClientError/Code/deferred``); never for an
    ///   answer from your route.
    public func data(for request: URLRequest, isIdempotent: Bool? = nil) async throws(AppAttestClientError) -> (
        Data, HTTPURLResponse
    ) {
        var signed = try await sign(request, isIdempotent: isIdempotent)
        while true {
            let data: Data, response: HTTPURLResponse
            do {
                (data, response) = try await transport.send(signed.request)
            } catch {
                abandon(signed)
                throw AppAttestClientError(.transport, "\(error)")
            }
            switch try await complete(signed, response: response, body: data) {
            case .answered: return (data, response)
            case .resend(let next): signed = next
            }
        }
    }

    // MARK: Concurrency

    /// Waits for a request's turn (a permit is free); returns its ticket.
    func admit() async throws(AppAttestClientError) -> Int {
        try await wait(until: { $0.permits > 0 })
        permits -= 1
        lastTicket += 1
        admitted.insert(lastTicket)
        return lastTicket
    }

    /// Waits until the request of `ticket` may be signed: no other signature is being made (so that counters follow
    /// the order of the sequence numbers), and its counter stays within the server's window of the oldest request
    /// still unanswered (so that no request is refused for arriving late).
    func beginSigning(_ ticket: Int) async throws(AppAttestClientError) {
        try await wait(until: { client in
            !client.signing && client.unanswered.values.allSatisfy { client.nextSequence - $0 < client.counterWindow }
        })
        signing = true
        unanswered[ticket] = nextSequence
        nextSequence += 1
    }

    /// The signature of `ticket` is made (or failed: its sequence number is given back).
    func endSigning(_ ticket: Int, signed: Bool) {
        signing = false
        if !signed { unanswered[ticket] = nil }
        wakeAll()
    }

    /// The request of `ticket` was answered (or failed, or was never sent): the waiting requests look again.
    func release(_ ticket: Int) {
        // Once per turn: a second release (an `abandon` after `complete`, say) would add a permit for good.
        guard admitted.remove(ticket) != nil else { return }
        unanswered[ticket] = nil
        permits += 1
        wakeAll()
    }

    private func wakeAll() {
        let waiting = waiters
        waiters.removeAll()
        for waiter in waiting { waiter.continuation.resume() }
    }

    /// Waits, cancellably, until `condition` holds.
    private func wait(until condition: (isolated AppAttestClient) -> Bool) async throws(AppAttestClientError) {
        while !condition(self) {
            lastWaiter += 1
            let id = lastWaiter
            await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    if Task.isCancelled { continuation.resume() } else { waiters.append((id, continuation)) }
                }
            } onCancel: {
                Task { await self.wake(id) }
            }
            guard !Task.isCancelled else { throw AppAttestClientError(.transport, "cancelled") }
        }
    }

    /// Resumes one waiter (its task was cancelled).
    func wake(_ id: Int) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        waiters.remove(at: index).continuation.resume()
    }
}
