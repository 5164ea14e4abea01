public import Foundation

#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

/// How the app's protected requests prove they are fresh: the same three modes as the server's
/// `AppAttestFreshness`, and the route group must use the same one (“Protecting your app's requests”).
public struct AppAttestClientFreshness: Sendable, Hashable, CustomStringConvertible {
    enum Mode: Sendable, Hashable {
        case challenge, nextChallenge, timestamp
    }

    let mode: Mode

    /// A one-time challenge fetched for each request (the server's default): one extra round trip per request.
    public static let challengePerRequest = AppAttestClientFreshness(mode: .challenge)
    /// The challenge of each request comes from the `App-Attest-Next-Challenge` header of an earlier answer; the
    /// client fetches one only when it has none left.
    public static let nextChallengeInResponse = AppAttestClientFreshness(mode: .nextChallenge)
    /// No challenge: the client data binds the current time, which the server accepts within its window.
    public static let timestamp = AppAttestClientFreshness(mode: .timestamp)

    /// The mode's name.
    public var description: String {
        switch mode {
        case .challenge: "challengePerRequest"
        case .nextChallenge: "nextChallengeInResponse"
        case .timestamp: "timestamp"
        }
    }
}

/// How many protected requests the client lets travel at once.
///
/// Each assertion carries the next value of the key's counter. A server that requires strictly increasing
/// counters refuses one that arrives after a higher one, so with it the client must finish each request before it
/// signs the next (``serialized``). A server with a reorder window of `n` counters (`counterReorderWindow`) accepts
/// them in any order within the window: the client then lets up to `n` travel together (``reorderWindow(_:)``).
public struct AppAttestClientConcurrency: Sendable, Hashable {
    /// The most protected requests between their assertion and their answer at once.
    public let maximumInFlight: Int

    /// One at a time, from the assertion to the answer: never refused by a strictly increasing counter.
    public static let serialized = AppAttestClientConcurrency(maximumInFlight: 1)

    /// Up to `size` at once (1 to 64), for a server whose reorder window is at least `size`: no counter can fall
    /// out of the window while its request travels.
    public static func reorderWindow(_ size: Int) -> AppAttestClientConcurrency {
        AppAttestClientConcurrency(maximumInFlight: min(max(size, 1), 64))
    }
}

/// Where the client registers its key and how it behaves.
public struct AppAttestClientConfiguration: Sendable {
    /// `POST {"purpose": "attestation"|"assertion", "keyId"?}` → `{"challenge"}` (the adapters' `challenge` route).
    public var challengeURL: URL
    /// `POST {"keyId", "attestationObject", "challenge"}` → 200 (the adapters' `attestation` route).
    public var attestationURL: URL
    /// How protected requests prove they are fresh; the server's route group must use the same mode.
    public var freshness: AppAttestClientFreshness
    /// How many protected requests travel at once.
    public var concurrency: AppAttestClientConcurrency
    /// How often an attestation is tried when Apple's or your server is unavailable (at least 1).
    public var maximumRegistrationAttempts: Int
    /// The first delay between attempts, in seconds; doubled each time, up to ``maximumRetryDelay``.
    public var initialRetryDelay: TimeInterval
    /// The longest delay between attempts, in seconds. A server's wait (`Retry-After`, at most a day) is taken with a
    /// random share of it more, up to half again, so that apps refused together come back spread out: when that is
    /// longer than this delay (or than what is left of it, for a challenge asked for again), the request ends with a
    /// ``AppAttestClientError/Code/deferred`` error that says until when (the same spread time), instead of being held
    /// that long, and the client signs and registers nothing before then. To have a `Retry-After` of up to `n`
    /// seconds waited within the request, make this at least 1.5 × `n`. One call of
    /// ``AppAttestClient/data(for:isIdempotent:)`` may wait several times (a challenge, an attestation, two retries),
    /// each within this delay.
    public var maximumRetryDelay: TimeInterval
    /// Whether a request whose method is not idempotent (POST, PATCH, or one you mark with
    /// ``AppAttestClient/data(for:isIdempotent:)``) is signed again and resent after a refusal that a duplicate
    /// delivery of it would also get (a challenge or counter already used, a timestamp too old). Off by default:
    /// such a request may have run, and the client throws ``AppAttestClientError/Code/requestMayHaveRun``.
    public var resendsNonIdempotentRequests: Bool
    /// Whether a key the server revoked is replaced by a new one automatically. Off by default, so that revoking a
    /// key stops the device until your app decides (the refusal is ``AppAttestClientError/Code/requestRefused``
    /// with the problem code `keyRevoked`).
    public var reattestsRevokedKeys: Bool
    /// The most keys the client replaces in 24 hours (a key that fails on the device, one the server no longer
    /// knows or says a newer key of the user superseded, one whose attestation the server refused); beyond it,
    /// ``AppAttestClientError/Code/deferred`` until the oldest replacement is a day old. Each replacement costs an
    /// attestation of Apple's budget for your app. The count is stored with the key, so a relaunch does not reset it.
    /// After an attestation the server refused, the client also waits before it attests again: a minute, four times
    /// longer after each refusal in a row, at most six hours.
    public var maximumKeyReplacementsPerDay: Int
    /// Applied to the client's own requests (challenges, attestation) before they are sent: add your app's
    /// authentication here, so that the server can bind the key to the user.
    public var prepareRegistrationRequest: @Sendable (URLRequest) async throws -> URLRequest
    /// The clock timestamps are read from.
    public var now: @Sendable () -> Date
    /// How long, in seconds, a next challenge that an answer carried is kept for a later request
    /// (``AppAttestClientFreshness/nextChallengeInResponse``): 240 by default, within the 300 that the package's
    /// servers keep a challenge. Keep it below your server's challenge lifetime: a server forgets an expired challenge
    /// once it purges it, and then answers it as it answers a used one, which a POST cannot be sent again after. The
    /// attestation challenge of a registration that ran out of attempts is kept as long, for the next one.
    public var nextChallengeLifetime: TimeInterval

    /// Explicit endpoints.
    public init(
        challengeURL: URL, attestationURL: URL, freshness: AppAttestClientFreshness = .challengePerRequest,
        concurrency: AppAttestClientConcurrency = .serialized
    ) {
        self.challengeURL = challengeURL
        self.attestationURL = attestationURL
        self.freshness = freshness
        self.concurrency = concurrency
        self.maximumRegistrationAttempts = 5
        self.initialRetryDelay = 1
        self.maximumRetryDelay = 60
        self.resendsNonIdempotentRequests = false
        self.reattestsRevokedKeys = false
        self.maximumKeyReplacementsPerDay = 3
        self.prepareRegistrationRequest = { $0 }
        self.now = { Date() }
        self.nextChallengeLifetime = 240
    }

    /// The routes of the Hummingbird and Vapor adapters under `baseURL`: `path/challenge` and `path/attestation`.
    public init(
        baseURL: URL, path: String = "appattest", freshness: AppAttestClientFreshness = .challengePerRequest,
        concurrency: AppAttestClientConcurrency = .serialized
    ) {
        let base = baseURL.appendingPathComponent(path)
        self.init(
            challengeURL: base.appendingPathComponent("challenge"),
            attestationURL: base.appendingPathComponent("attestation"), freshness: freshness,
            concurrency: concurrency)
    }
}

/// Why the client could not register its key or send a request.
public struct AppAttestClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        /// The name of the code.
        public let name: String
        /// App Attest is not available on this device: choose your fallback (for example a DeviceCheck token).
        public static let featureUnsupported = Code(name: "featureUnsupported")
        /// The key provider failed (``AppAttestClientError/providerCode`` says how).
        public static let keyProvider = Code(name: "keyProvider")
        /// The server refused the key's registration (``AppAttestClientError/status`` and
        /// ``AppAttestClientError/problemCode`` say why).
        public static let registrationRefused = Code(name: "registrationRefused")
        /// The server could not be reached, or answered with something that is not what its API promises.
        public static let transport = Code(name: "transport")
        /// The request cannot be signed: no URL, a method that is not an HTTP token, a target longer than 8 KiB,
        /// or a streamed body (set `httpBody`).
        public static let unsupportedRequest = Code(name: "unsupportedRequest")
        /// The key storage failed.
        public static let storage = Code(name: "storage")
        /// The server's App Attest layer refused the request, before your route ran, for a reason the client cannot
        /// repair (``AppAttestClientError/problemCode`` and ``AppAttestClientError/action`` say which): not a
        /// logout, and sending it again will not help.
        public static let requestRefused = Code(name: "requestRefused")
        /// The server refused the request as it refuses a second delivery of one it accepted (its challenge or counter
        /// was already used, or its timestamp is too old): the request may have run. It was not resent, because its
        /// method is not idempotent (``AppAttestClientConfiguration/resendsNonIdempotentRequests``). Also thrown
        /// when such a request, told to come back (`retry`: 429, 503), could not be sent again as it was signed
        /// (out of retries, or a wait longer than ``AppAttestClientConfiguration/maximumRetryDelay``, then with
        /// ``AppAttestClientError/retryAfter``): that answer may have been a second delivery's while the first ran.
        /// Either way it may be a false alarm; look the outcome up, or resend with an idempotency key of your API.
        public static let requestMayHaveRun = Code(name: "requestMayHaveRun")
        /// The client will not try before ``AppAttestClientError/retryAfter``: the server asked for a wait that, with
        /// the random share the client adds to spread apps out, is longer than
        /// ``AppAttestClientConfiguration/maximumRetryDelay``; the server refused attestations; or the key
        /// replacements of the day are spent. After the first, when the server's App Attest layer asked for the wait,
        /// this client signs, sends and registers nothing until then (it keeps that in memory: a relaunch forgets
        /// it); after the others it registers no key until then.
        public static let deferred = Code(name: "deferred")
        /// The name of the code.
        public var description: String { name }
    }

    /// The kind of failure.
    public let code: Code
    /// What happened, for logs.
    public let message: String
    /// The HTTP status of the refusal, if the server answered.
    public let status: Int?
    /// The `code` of the server's problem document, if it sent one.
    public let problemCode: String?
    /// The key provider's code, for ``Code/keyProvider`` and ``Code/featureUnsupported``.
    public let providerCode: AppAttestKeyProviderError.Code?
    /// The `action` of the server's problem document, if it sent one (`retry`, `refetchChallenge`, `reattest` or
    /// `none`).
    public let action: String?
    /// When the client will try again, for ``Code/deferred``; for ``Code/requestMayHaveRun`` after a `retry`, when
    /// the server asked to come back.
    public let retryAfter: Date?

    init(
        _ code: Code, _ message: String, status: Int? = nil, problemCode: String? = nil,
        providerCode: AppAttestKeyProviderError.Code? = nil, action: String? = nil, retryAfter: Date? = nil
    ) {
        self.code = code
        self.message = message
        self.status = status
        self.problemCode = problemCode
        self.providerCode = providerCode
        self.action = action
        self.retryAfter = retryAfter
    }

    /// The code, and what happened.
    public var description: String { "\(code.name): \(message)" }
}
