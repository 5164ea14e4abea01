internal import AppAttestWire
internal import Crypto
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension AppAttestClient {
    // MARK: Registration

    /// The current key (nil when there is none, or it was discarded), loading it and the history the first time.
    func storedKey() async throws(AppAttestClientError) -> AppAttestStoredKey? {
        if !loaded {
            // One load for the calls that arrive together: each of its own would apply what it read when it resumed,
            // after another call had perhaps replaced the key and saved that, and bring the replaced key back.
            let load: Task<AppAttestStoredKey?, any Error>
            if let loading {
                load = loading
            } else {
                let storage = keyStorage
                load = Task { try await storage.load() }
                loading = load
            }
            let record: AppAttestStoredKey?
            do { record = try await load.value } catch is DecodingError {
                // A record this version cannot read (a downgrade, a damaged item) would fail every call, and a
                // Keychain item outlives a reinstall: read as none, and replaced at the next save. A storage that
                // cannot be read at all (a locked Keychain) still fails, so that a key is not replaced for it.
                record = nil
            } catch {
                if loading == load { loading = nil }
                throw AppAttestClientError(.storage, "\(error)")
            }
            // Applied once, by the first call to resume; the others find it applied (and what followed, kept).
            if !loaded {
                history = record?.history ?? AppAttestStoredKey.History()
                clockOffset = history.clockOffset ?? 0
                key = record?.discarded == true ? nil : record
                discardedKeyID = record?.discarded == true ? record?.keyID : nil
                loaded = true
                loading = nil
            }
        }
        return key
    }

    /// Makes `stored` the current key and stores it with the history.
    func save(_ stored: AppAttestStoredKey) async throws(AppAttestClientError) {
        key = stored
        var record = stored
        record.history = history.isEmpty ? nil : history
        let storage = keyStorage
        try await write { [record] in try await storage.save(record) }
    }

    /// No current key: the storage keeps `keyID` marked discarded when there is history to remember, else nothing.
    func saveNoKey(last keyID: String?) async throws(AppAttestClientError) {
        key = nil
        discardedKeyID = keyID
        let storage = keyStorage
        if let keyID, !history.isEmpty {
            let record = AppAttestStoredKey(keyID: keyID, registered: false, discarded: true, history: history)
            try await write { try await storage.save(record) }
        } else {
            try await write { try await storage.remove() }
        }
    }

    /// Stores the history as it is: with the current key, or beside the last discarded one.
    func saveHistory() async throws(AppAttestClientError) {
        if let key { try await save(key) } else { try await saveNoKey(last: discardedKeyID) }
    }

    /// Runs a storage write after every write started before it: the actor lets other calls run while a write
    /// awaits, and a later state must never be overwritten by an earlier one that finishes last.
    private func write(_ body: @escaping @Sendable () async throws -> Void) async throws(AppAttestClientError) {
        let previous = lastWrite
        let current = Task { () -> Result<Void, AppAttestClientError> in
            _ = await previous?.value
            do {
                try await body()
                return .success(())
            } catch {
                return .failure(AppAttestClientError(.storage, "\(error)"))
            }
        }
        lastWrite = current
        try await current.value.get()
    }

    /// Drops `keyID` if it is still the current key, so that the next request registers a new one; `counted`
    /// discards count against the day's budget.
    func forget(_ keyID: String, counted: Bool = true) async throws(AppAttestClientError) {
        guard key?.keyID == keyID else { return }
        challenges.removeAll()
        if counted { history.discards.append(configuration.now()) }
        try await saveNoKey(last: keyID)
    }

    /// Throws a deferral while the server's refusals say to wait, or, for a new key, when the day's keys are spent.
    func checkAttestationBudget(newKey: Bool) async throws(AppAttestClientError) {
        let now = configuration.now()
        // Never longer than the wait these refusals give from now, whatever the clock said when it was stored: a
        // clock set back since would otherwise hold every registration until it caught up again.
        if let stored = history.notBefore, stored > now {
            let notBefore = min(stored, now.addingTimeInterval(Self.refusalBackoff(history.refusedAttestations)))
            if notBefore < stored {
                // Stored as shortened, so that a relaunch waits until then, not for the whole wait again from its
                // own time (an app relaunched more often than the wait would never register).
                history.notBefore = notBefore
                try await saveHistory()
            }
            throw publishedOnce(
                AppAttestClientError(
                    .deferred,
                    "\(history.refusedAttestations) registrations in a row were refused, or found Apple unavailable",
                    retryAfter: notBefore))
        }
        guard newKey else { return }
        history.discards.removeAll { now.timeIntervalSince($0) >= 86_400 || $0 > now }
        if history.discards.count > max(configuration.maximumKeyReplacementsPerDay, 0) {
            throw publishedOnce(
                AppAttestClientError(
                    .deferred, "\(history.discards.count) keys were discarded in the last 24 hours",
                    retryAfter: (history.discards.min() ?? now).addingTimeInterval(86_400)))
        }
    }

    /// `error`, a deferral of the attestation budget, published when its time is not the one last published: a wait
    /// is announced once, not once for each call it refuses (an app that calls again at once would otherwise flood
    /// ``events`` with the same one).
    func publishedOnce(_ error: AppAttestClientError) -> AppAttestClientError {
        guard error.retryAfter != publishedBudgetDeferral else { return error }
        publishedBudgetDeferral = error.retryAfter
        return published(error)
    }

    /// The wait after `refusals` failed registrations in a row (refused, or out of attempts): a minute, then four times
    /// longer each time, at most six hours.
    static func refusalBackoff(_ refusals: Int) -> TimeInterval {
        min(60 * pow(4, Double(max(refusals, 1) - 1)), 6 * 3600)
    }

    func performRegistration() async throws(AppAttestClientError) -> AppAttestStoredKey {
        guard await keyProvider.isSupported else {
            throw AppAttestClientError(
                .featureUnsupported, "App Attest is not supported on this device", providerCode: .featureUnsupported)
        }
        let generation = keyGeneration
        /// Throws once the key was reset (or the registration cancelled) while this registration waited.
        func checkCurrent() throws(AppAttestClientError) {
            guard generation == keyGeneration, !Task.isCancelled else {
                throw AppAttestClientError(.transport, "cancelled: the key was reset")
            }
        }
        let stored = try await storedKey()
        var keyID = stored?.keyID
        // A key is attested once: its object is kept (stored, across launches) and posted again, same key and same
        // challenge, until the server answers.
        var attestation: (keyID: String, object: Data, challenge: [UInt8])? = stored.flatMap { stored in
            stored.pendingAttestation.map { (stored.keyID, $0.object, Array($0.challenge)) }
        }
        // A challenge kept from a registration that ran out of attempts serves this one while the server still has it.
        if let kept = keptAttestationChallenge, !isFresh(kept.received) { keptAttestationChallenge = nil }
        var lastError = AppAttestClientError(.transport, "no attempt was made")
        for attempt in 0..<max(configuration.maximumRegistrationAttempts, 1) {
            if attempt > 0 {
                do { try await backoff(attempt, after: lastError) } catch { throw published(error) }
            }
            do {
                if keyID == nil {
                    try await checkAttestationBudget(newKey: true)
                    let generated = try await provider { try await keyProvider.generateKey() }
                    try checkCurrent()
                    emit(AppAttestClientEvent(.keyGenerated, keyID: generated))
                    try await save(AppAttestStoredKey(keyID: generated, registered: false))
                    keyID = generated
                }
                guard let current = keyID else { continue }
                if attestation?.keyID != current {
                    try await checkAttestationBudget(newKey: false)
                    // Apple asks that an attestation it could not make (serverUnavailable) be asked again with the
                    // same key and the same clientDataHash: the challenge is fetched once per key.
                    let challenge: [UInt8]
                    if let kept = keptAttestationChallenge, kept.keyID == current {
                        challenge = kept.challenge
                    } else {
                        challenge = try await fetchChallenge(purpose: "attestation", keyID: nil)
                        try checkCurrent()
                        keptAttestationChallenge = (current, challenge, ContinuousClock.now)
                    }
                    let object = try await provider {
                        try await keyProvider.attestKey(current, clientDataHash: Data(SHA256.hash(data: challenge)))
                    }
                    try checkCurrent()
                    attestation = (current, object, challenge)
                    try await save(
                        AppAttestStoredKey(
                            keyID: current, registered: false,
                            pendingAttestation: .init(object: object, challenge: Data(challenge))))
                }
                guard let (_, object, challenge) = attestation else { continue }
                try await postAttestation(keyID: current, object: object, challenge: challenge)
                try checkCurrent()
                emit(AppAttestClientEvent(.keyAttested, keyID: current))
                history.refusedAttestations = 0
                history.notBefore = nil
                keptAttestationChallenge = nil
                let registered = AppAttestStoredKey(keyID: current, registered: true)
                challenges.removeAll()
                try await save(registered)
                return registered
            } catch {
                try checkCurrent()
                lastError = error
                if error.code == .deferred { throw error }
                let refused =
                    error.code == .registrationRefused && error.problemCode != nil
                    && error.status.map { $0 < 500 && $0 != 429 } == true
                if refused {
                    emit(
                        AppAttestClientEvent(
                            .attestationRefused, keyID: keyID, code: error.problemCode, status: error.status))
                }
                var recovery = Self.registrationRecovery(error)
                if attestation != nil, refused, let code = error.problemCode,
                    Self.refusalsOfTheRequest.contains(code)
                {
                    // Refused for the request, not the attestation (a backend whose token to the verifying service
                    // was rotated, say): the attested key and its attestation are kept (stored), and posted again
                    // with the next request, so that an outage shorter than the challenge's lifetime costs none of
                    // Apple's attestations.
                    throw error
                } else if attestation != nil, refused,
                    ["challengeUnknown", "challengeExpired"].contains(error.problemCode)
                {
                    // The object's challenge is gone and the key cannot be attested again: a new key.
                    recovery = .newKey
                } else if attestation != nil, refused, recovery == nil {
                    // The server refused the attestation itself (environment, App ID, ...): attesting again at once
                    // would be refused too. The key is discarded and the client waits, longer after each refusal.
                    history.refusedAttestations += 1
                    history.notBefore = configuration.now().addingTimeInterval(
                        Self.refusalBackoff(history.refusedAttestations))
                    if let current = keyID { try await forget(current) }
                    throw error
                }
                switch recovery {
                case .newKey:
                    // The key cannot be attested (already attested, or gone): a new one.
                    if let current = keyID { try await forget(current) }
                    keyID = nil
                    attestation = nil
                    keptAttestationChallenge = nil
                case .retry: continue
                case .none: throw error
                }
            }
        }
        // Out of attempts while Apple was unavailable (throttling, an outage): the next registration waits, longer
        // each time (stored, so that a relaunch waits too), so that an app that retries its requests does not call a
        // throttled Apple, and spend the server's attestation budget, again and again. The key is kept for it, with
        // its challenge while the server keeps that. Not for a device without a network, or a server that did not
        // answer: waiting would spare Apple nothing, and the next request, once connected, should register at once.
        if lastError.code == .keyProvider, lastError.providerCode == .serverUnavailable {
            history.refusedAttestations += 1
            history.notBefore = configuration.now().addingTimeInterval(
                Self.refusalBackoff(history.refusedAttestations))
            try await saveHistory()
        }
        throw lastError
    }

    /// Refusals of an attestation's post that say nothing of the attestation: the server refused the request, its
    /// caller or its user identifier before looking at the object.
    static let refusalsOfTheRequest: Set<String> = ["unauthorized", "forbidden", "invalidUserID"]

    enum RegistrationRecovery {
        case newKey, retry
    }

    /// How a failed registration attempt can recover: a new key after `invalidKey`, `invalidInput` or
    /// `unknownSystemFailure`, another attempt when Apple or the server is unavailable; nil when it cannot.
    static func registrationRecovery(_ error: AppAttestClientError) -> RegistrationRecovery? {
        // Apple: apart from serverUnavailable, discard the key and create a new one.
        if error.code == .keyProvider, let code = error.providerCode, keyDiscardingProviderCodes.contains(code) {
            return .newKey
        }
        if error.code == .keyProvider, error.providerCode == .serverUnavailable { return .retry }
        if error.code == .transport { return .retry }
        if error.code == .registrationRefused, let status = error.status, status >= 500 || status == 429 {
            return .retry
        }
        return nil
    }

    /// Waits before attempt `attempt`: the server's `Retry-After` when the last refusal had one, and a random share
    /// more (a deferral when that is longer than ``AppAttestClientConfiguration/maximumRetryDelay``), exponential
    /// backoff otherwise.
    func backoff(_ attempt: Int, after error: AppAttestClientError) async throws(AppAttestClientError) {
        if let until = error.retryAfter {
            let wait = waitAfterRefusal(told: until.timeIntervalSince(configuration.now()), afterRetries: attempt - 1)
            switch Self.retryWait(toldToWait: wait, within: configuration.maximumRetryDelay) {
            case .sleep(let seconds): return try await Self.sleep(seconds: seconds)
            case .deferral(let seconds):
                throw serverDeferral(
                    "the server asked to wait \(Self.wholeSeconds(wait)) s", for: seconds, status: error.status,
                    problemCode: error.problemCode, action: error.action)
            }
        }
        let delay = Self.boundedWait(min(exponentialDelay(afterRetries: attempt - 1), configuration.maximumRetryDelay))
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
        // A busy server (429, 503) says when to come back: waited for, up to maximumRetryDelay in all and
        // maximumChallengeRetries times, so that many requests at once are served at the server's rate instead of
        // failing. A wait of nothing (`Retry-After: 0`, a date already past, none at all) is taken as the exponential
        // backoff's, from initialRetryDelay: never a loop of requests.
        var waited: TimeInterval = 0
        var retries = 0
        var answer: Answer?
        while answer == nil {
            // A deferral kept while this request waited ends it too.
            if retries > 0 { try checkServerDeferral() }
            do {
                answer = try await postJSON(
                    configuration.challengeURL, Body(purpose: purpose, keyId: keyID), what: "challenge")
            } catch  where error.code == .registrationRefused && [429, 503].contains(error.status ?? 0) {
                let told = error.retryAfter.map { $0.timeIntervalSince(configuration.now()) } ?? 0
                let wait = waitAfterRefusal(told: told, afterRetries: retries)
                // What was slept counts, the random share included, so that the total stays within the limit.
                let next =
                    retries < Self.maximumChallengeRetries
                    ? Self.retryWait(toldToWait: wait, within: configuration.maximumRetryDelay - waited)
                    : .deferral(Self.spread(wait))
                switch next {
                case .sleep(let delay):
                    try await Self.sleep(seconds: delay)
                    waited += delay
                    retries += 1
                case .deferral(let delay):
                    throw published(
                        serverDeferral(
                            "the challenge route is busy: \(retries + 1) refusals, next try in "
                                + "\(Self.wholeSeconds(delay)) s", for: delay,
                            status: error.status, problemCode: error.problemCode, action: error.action))
                }
            }
        }
        guard let answer else { throw AppAttestClientError(.transport, "no challenge") }
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
            // Only the server's App Attest problem documents speak for it: a 401 of your own authentication, a
            // proxy's 403 or a misrouted 404 is not a refusal of the attestation.
            let isProblem =
                response.value(forHTTPHeaderField: "Content-Type")?.hasPrefix("application/problem+json") == true
            let problem = (isProblem ? try? JSONDecoder().decode(Problem.self, from: data) : nil).flatMap {
                $0.type == Self.problemType ? $0 : nil
            }
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
