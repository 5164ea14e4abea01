internal import AppAttestWire
internal import Crypto
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension AppAttestClient {
    // MARK: Refusals and what the client does about them

    /// What one call of `data(for:)` has spent of its repairs: each kind at most once, so that no refusal loops.
    struct RequestAttempt {
        var replacedKey = false
        var refetched = false
        var retries = 0
    }

    /// A refusal by the server's App Attest layer, before any route ran: a problem document of the package's type.
    struct Refusal {
        var status: Int
        var code: String
        var action: String
        /// `Retry-After`, in seconds.
        var retryAfter: TimeInterval?
        /// The answer's `Date`, the server's clock.
        var serverDate: Date?
    }

    /// The `type` of the server's problem documents: what tells an App Attest refusal from a route's own answer.
    static let problemType = "https://github.com/swift-app-attest/swift-app-attest/blob/main/README.md#errors"
    /// The methods resent after a refusal that a duplicate delivery would also get (RFC 9110's idempotent methods).
    static let idempotentMethods: Set<String> = ["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"]
    /// Refusals with `refetchChallenge` that a request which ran cannot get: its challenge was never consumed.
    static let unconsumedChallengeCodes: Set<String> = ["challengeExpired", "challengeMismatch"]
    /// How often one request waits for `Retry-After` and is sent again.
    static let maximumRetriesPerRequest = 2
    /// How often one challenge request waits for a busy challenge route (429, 503) and is sent again, within
    /// ``AppAttestClientConfiguration/maximumRetryDelay`` in all.
    static let maximumChallengeRetries = 6
    /// Key provider codes after which an assertion's key is discarded and a new one registered (Apple: apart from
    /// `serverUnavailable`, discard the key identifier and create a new key).
    static let keyDiscardingProviderCodes: Set<AppAttestKeyProviderError.Code> = [
        .invalidKey, .invalidInput, .unknownSystemFailure,
    ]

    /// The App Attest refusal an answer carries; nil for any other answer (your route's, whatever its status).
    static func refusal(for response: HTTPURLResponse, _ data: Data) -> Refusal? {
        guard response.statusCode >= 400,
            response.value(forHTTPHeaderField: "Content-Type")?.hasPrefix("application/problem+json") == true,
            data.count <= 16 * 1024,
            let problem = try? JSONDecoder().decode(Problem.self, from: data), problem.type == problemType
        else { return nil }
        return Refusal(
            status: response.statusCode, code: problem.code, action: problem.action ?? "none",
            retryAfter: retryAfter(response), serverDate: date(response))
    }

    struct Problem: Decodable {
        var type: String?
        var code: String
        var action: String?
    }

    /// Does what the refusal's action says, within what the request has left; throws when the request must not, or
    /// cannot, be sent again.
    func recover(
        from refusal: Refusal, keyID: String, resendable: Bool, attempt: inout RequestAttempt
    ) async throws(AppAttestClientError) {
        let refused = AppAttestClientError(
            .requestRefused, "the server's App Attest layer refused the request: \(refusal.code)",
            status: refusal.status, problemCode: refusal.code, action: refusal.action)
        switch refusal.action {
        case "retry":
            guard attempt.retries < Self.maximumRetriesPerRequest else { throw refused }
            attempt.retries += 1
            let wait = waitAfterRefusal(told: refusal.retryAfter ?? 0, afterRetries: attempt.retries - 1)
            switch Self.retryWait(toldToWait: wait, within: configuration.maximumRetryDelay) {
            case .sleep(let seconds): try await Self.sleep(seconds: seconds)
            case .deferral(let seconds):
                throw serverDeferral(
                    "the server asked to wait \(Self.wholeSeconds(wait)) s", for: seconds, status: refusal.status,
                    problemCode: refusal.code, action: refusal.action)
            }
        case "refetchChallenge":
            // What the refusal teaches is learnt whether or not this request may be sent again, so that the next one
            // is not refused alike: the kept challenges go (the one refused came from them, and its elders are no
            // fresher), and a stale timestamp gives the server's clock.
            challenges.removeAll()
            if refusal.code == "staleTimestamp", let serverDate = refusal.serverDate {
                clockOffset = serverDate.timeIntervalSince(configuration.now())
                // Kept with the key, so that the first request after a launch is not refused alike (a POST, which
                // cannot be sent again, would fail at every launch); a storage that fails only loses that.
                history.clockOffset = clockOffset
                try? await saveHistory()
            }
            guard !attempt.refetched else { throw refused }
            guard resendable || Self.unconsumedChallengeCodes.contains(refusal.code) else {
                throw AppAttestClientError(
                    .requestMayHaveRun,
                    "refused with \(refusal.code), as a second delivery of an accepted request is: it may have run",
                    status: refusal.status, problemCode: refusal.code, action: refusal.action)
            }
            attempt.refetched = true
        default:
            guard replacesKey(code: refusal.code, action: refusal.action), !attempt.replacedKey else { throw refused }
            attempt.replacedKey = true
            try await replaceKey(keyID, reason: refusal.code)
        }
    }

    /// Whether a refusal of the server's App Attest layer is of the key itself, which a new key repairs: its action is
    /// `reattest`, or it is `keyRevoked` and ``AppAttestClientConfiguration/reattestsRevokedKeys`` is set.
    func replacesKey(code: String, action: String?) -> Bool {
        action == "reattest" || (code == "keyRevoked" && configuration.reattestsRevokedKeys)
    }

    /// Discards `keyID` (if it is still the current key) so that the next request registers a new one, within
    /// ``AppAttestClientConfiguration/maximumKeyReplacementsPerDay``.
    func replaceKey(_ keyID: String, reason: String) async throws(AppAttestClientError) {
        guard key?.keyID == keyID else { return }
        emit(AppAttestClientEvent(.keyReset, keyID: keyID, code: reason))
        try await forget(keyID)
    }

    /// What the client does when a server said to wait `wait` seconds (`Retry-After`), held to `limit`
    /// (``AppAttestClientConfiguration/maximumRetryDelay``).
    enum RetryWait: Equatable {
        /// Wait this long within the request, then send it again.
        case sleep(TimeInterval)
        /// Give up the request with a deferral that says to come back this long from now.
        case deferral(TimeInterval)
    }

    /// The longest wait the client takes from a server, in seconds (a day, the longest `Retry-After` the package's
    /// servers send): a longer one, or a configured delay of `infinity`, counts as this long.
    static let maximumServerWait: TimeInterval = 86_400

    /// `wait` as the client takes it: 0 for a negative or NaN wait, at most ``maximumServerWait``.
    static func boundedWait(_ wait: TimeInterval) -> TimeInterval {
        wait.isNaN ? 0 : min(max(wait, 0), maximumServerWait)
    }

    /// Whole seconds of a wait, for messages.
    static func wholeSeconds(_ wait: TimeInterval) -> Int { Int(boundedWait(wait).rounded(.up)) }

    /// The server's wait and a random share of it more, up to half again: a server that refused many apps at once
    /// (its attestation budget spent, a failover) gives them all the same wait, and apps that came back together would
    /// be refused together again. Waited within the request when that fits in `limit`; otherwise a deferral to that
    /// time, spread alike. Never sooner than `wait` (at most ``maximumServerWait``), and never held back to `limit`,
    /// where apps told a wait near it would all come back at the same instant.
    static func retryWait(toldToWait wait: TimeInterval, within limit: TimeInterval) -> RetryWait {
        let spread = spread(wait)
        return spread <= limit ? .sleep(spread) : .deferral(spread)
    }

    /// `wait` (bounded, ``boundedWait(_:)``) and a random share of it more, up to half again.
    static func spread(_ wait: TimeInterval) -> TimeInterval {
        let wait = boundedWait(wait)
        return wait + Double.random(in: 0...(wait / 2))
    }

    /// The exponential backoff's delay after `retries` failed tries: ``AppAttestClientConfiguration/initialRetryDelay``
    /// doubled each time (bounded, ``boundedWait(_:)``).
    func exponentialDelay(afterRetries retries: Int) -> TimeInterval {
        Self.boundedWait(configuration.initialRetryDelay * pow(2, Double(retries)))
    }

    /// The wait a server asked for after `retries` retries (its `Retry-After`, `told` seconds from now), at least the
    /// exponential backoff's step within ``AppAttestClientConfiguration/maximumRetryDelay``: a wait of nothing
    /// (`Retry-After: 0`, a date past, none at all) is never sent again at once.
    func waitAfterRefusal(told: TimeInterval, afterRetries retries: Int) -> TimeInterval {
        max(Self.boundedWait(told), min(exponentialDelay(afterRetries: retries), configuration.maximumRetryDelay))
    }

    /// A deferral the client keeps: the error thrown, and when it ends by the time that passes (so that a device
    /// clock set back does not hold the client longer than the server asked).
    struct KeptDeferral {
        var error: AppAttestClientError
        var deadline: ContinuousClock.Instant
    }

    /// A deferral because the server asked for a wait longer than a request may take (`seconds` from now, the random
    /// share included). Kept when it is a refusal of the server's App Attest layer (`problemCode`), so that no request
    /// is signed and no key registered before then; a proxy's or a CDN's 429 or 503, which speaks for no App Attest
    /// server, defers this call alone.
    func serverDeferral(
        _ message: String, for seconds: TimeInterval, status: Int?, problemCode: String?, action: String?
    ) -> AppAttestClientError {
        let until = configuration.now().addingTimeInterval(seconds)
        let error = AppAttestClientError(
            .deferred, message, status: status, problemCode: problemCode, action: action, retryAfter: until)
        if problemCode != nil, keptDeferral.map({ ($0.error.retryAfter ?? .distantPast) < until }) ?? true {
            keptDeferral = KeptDeferral(error: error, deadline: .now + .seconds(seconds))
        }
        return error
    }

    /// Throws the kept deferral again (``serverDeferral(_:for:status:problemCode:action:)``) until its time: by the
    /// configured clock, and never past the time its wait gives from when it was kept (a clock set back). Without an
    /// event: its `deferred` event was published when it was first thrown, and an app that calls again at once would
    /// otherwise flood ``events`` with the same one.
    func checkServerDeferral() throws(AppAttestClientError) {
        guard let kept = keptDeferral else { return }
        let now = configuration.now()
        let left = ContinuousClock.now.duration(to: kept.deadline)
        let seconds = Double(left.components.seconds) + Double(left.components.attoseconds) * 1e-18
        guard let until = kept.error.retryAfter, until > now, seconds > 0 else {
            keptDeferral = nil
            return
        }
        throw AppAttestClientError(
            .deferred, kept.error.message, status: kept.error.status, problemCode: kept.error.problemCode,
            action: kept.error.action,
            // Its own time, unless the clock was set back since (by more than a second): then the time left.
            retryAfter: until.timeIntervalSince(now) <= seconds + 1 ? until : now.addingTimeInterval(seconds))
    }

    static func sleep(seconds: TimeInterval) async throws(AppAttestClientError) {
        // Bounded as every wait is (half again for the random share): `UInt64` of a larger count of nanoseconds traps.
        let seconds = min(boundedWait(seconds), maximumServerWait * 1.5)
        do { try await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000)) } catch {
            throw AppAttestClientError(.transport, "cancelled")
        }
    }

    /// `Retry-After` in seconds (at most ``maximumServerWait``), as a number of seconds or an HTTP date; a date is
    /// measured from the answer's `Date` when it has one (the server's clock), so that a device clock set wrong
    /// neither cuts the wait to nothing nor stretches it by the clock's error.
    static func retryAfter(_ response: HTTPURLResponse) -> TimeInterval? {
        guard let text = response.value(forHTTPHeaderField: "Retry-After") else { return nil }
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if !trimmed.isEmpty, trimmed.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            // Digits only: as many as they are, a number too large for `Int` is as long as the longest wait.
            return Int(trimmed).map { boundedWait(TimeInterval($0)) } ?? maximumServerWait
        }
        guard let until = httpDate(text) else { return nil }
        return boundedWait(until.timeIntervalSince(date(response) ?? Date()))
    }

    static func date(_ response: HTTPURLResponse) -> Date? {
        response.value(forHTTPHeaderField: "Date").flatMap(httpDate)
    }

    static func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text)
    }
}
