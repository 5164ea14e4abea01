public import Foundation

#if canImport(os)
import os
#endif

/// What happened in the key's lifecycle and to the app's requests, for the app to log or count
/// (``AppAttestClient/events``). On Apple platforms each event is also logged with `os.Logger` (subsystem
/// `swift-app-attest`, category `client`), the keyId private.
public struct AppAttestClientEvent: Sendable, Hashable, CustomStringConvertible {
    /// What kind of event it is. A struct with static members, so that kinds can be added without breaking a
    /// `switch` in your code.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        /// The kind's name.
        public let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// A key was generated.
        public static let keyGenerated = Kind("keyGenerated")
        /// The server accepted the key's attestation.
        public static let keyAttested = Kind("keyAttested")
        /// The server refused the key's attestation (``AppAttestClientEvent/code`` says why).
        public static let attestationRefused = Kind("attestationRefused")
        /// The key was discarded (``AppAttestClientEvent/code``: the device's or the server's code, or `reset`).
        public static let keyReset = Kind("keyReset")
        /// The client will not try before ``AppAttestClientEvent/until``.
        public static let deferred = Kind("deferred")
        /// A refusal was repaired and the request sent again (``AppAttestClientEvent/code`` is the refusal's).
        public static let repaired = Kind("repaired")
        /// A protected request was answered (``AppAttestClientEvent/status``, ``AppAttestClientEvent/latency``).
        public static let answered = Kind("answered")
    }

    /// What happened.
    public let kind: Kind
    /// The key concerned, if any (Base64).
    public let keyID: String?
    /// The refusal's, device's or reset's code, if any.
    public let code: String?
    /// The HTTP status, for an answer or a refusal.
    public let status: Int?
    /// Until when the client defers, for ``Kind/deferred``.
    public let until: Date?
    /// Seconds from the request's start to its answer, repairs included, for ``Kind/answered``.
    public let latency: TimeInterval?

    init(
        _ kind: Kind, keyID: String? = nil, code: String? = nil, status: Int? = nil, until: Date? = nil,
        latency: TimeInterval? = nil
    ) {
        self.kind = kind
        self.keyID = keyID
        self.code = code
        self.status = status
        self.until = until
        self.latency = latency
    }

    /// The kind and its details, without the keyId.
    public var description: String {
        var parts = [kind.name]
        if let code { parts.append("code=\(code)") }
        if let status { parts.append("status=\(status)") }
        if let until { parts.append("until=\(until)") }
        if let latency { parts.append("latency=\(Int((latency * 1000).rounded())) ms") }
        return parts.joined(separator: " ")
    }
}

extension AppAttestClient {
    /// The most events kept for a reader that is behind; older ones are dropped.
    static let eventBuffer = 256

    #if canImport(os)
    static let logger = Logger(subsystem: "swift-app-attest", category: "client")
    #endif

    /// Publishes an event on ``events`` (and to `os.Logger` on Apple platforms).
    func emit(_ event: AppAttestClientEvent) {
        eventContinuation.yield(event)
        #if canImport(os)
        Self.logger.info(
            "\(event.description, privacy: .public) key=\(event.keyID ?? "-", privacy: .private)")
        #endif
    }

    /// `error`, published first when it is a deferral.
    func published(_ error: AppAttestClientError) -> AppAttestClientError {
        if error.code == .deferred {
            emit(AppAttestClientEvent(.deferred, code: error.problemCode, until: error.retryAfter))
        }
        return error
    }
}
