#if AppleServerAPI
/// Why a call to Apple's DeviceCheck or receipt endpoint failed, and whose fault it is (“Receipts and the risk metric”,
/// “DeviceCheck's two bits”).
public struct AppleAPIError: Error, Sendable, CustomStringConvertible {
    /// What Apple (or the transport) answered. Stable names; new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The code's name.
        public let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// 400: the device token is missing or malformed.
        public static let badDeviceToken = Code("badDeviceToken")
        /// 400: the bits are missing or malformed.
        public static let badBits = Code("badBits")
        /// 400: the timestamp is missing or malformed (or our clock is off).
        public static let badTimestamp = Code("badTimestamp")
        /// 400: the provider token is missing or malformed.
        public static let badAuthorizationToken = Code("badAuthorizationToken")
        /// 400: the body is missing or malformed.
        public static let badPayload = Code("badPayload")
        /// 400 on receipt refresh: a receipt of the other environment.
        public static let incorrectEnvironment = Code("incorrectEnvironment")
        /// 401: the provider token cannot be verified (or does not match the receipt's team).
        public static let invalidAuthorizationToken = Code("invalidAuthorizationToken")
        /// 401: the provider token is too old.
        public static let authorizationTokenExpired = Code("authorizationTokenExpired")
        /// 403.
        public static let forbidden = Code("forbidden")
        /// 405.
        public static let methodNotAllowed = Code("methodNotAllowed")
        /// 429.
        public static let tooManyRequests = Code("tooManyRequests")
        /// 500.
        public static let serverError = Code("serverError")
        /// 503.
        public static let serviceUnavailable = Code("serviceUnavailable")
        /// A status or body this library does not expect.
        public static let unexpectedResponse = Code("unexpectedResponse")
        /// The refresh endpoint returned a receipt that does not validate.
        public static let invalidReceipt = Code("invalidReceipt")
        /// No answer: connection, TLS or timeout.
        public static let transport = Code("transport")
        /// Our credentials could not be loaded or used.
        public static let invalidCredentials = Code("invalidCredentials")
    }

    /// Whose fault it is, which says what to do about it.
    ///
    /// A struct with static members rather than an enum, so that a new kind of fault can be added without breaking a
    /// `switch` in code that handles the existing ones.
    public struct Fault: Hashable, Sendable, CustomStringConvertible {
        /// The fault's name, as logs and the command's output show it.
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The device token the app sent: ask the app for a new one; do not retry.
        public static let deviceToken = Fault("deviceToken")
        /// Our key, Key ID or Team ID: fix the configuration; do not retry.
        public static let credentials = Fault("credentials")
        /// Our request (a library or caller bug): do not retry.
        public static let request = Fault("request")
        /// Our clock: check time synchronisation.
        public static let clock = Fault("clock")
        /// The environment chosen for the call does not match the data.
        public static let environment = Fault("environment")
        /// Apple's side: retry later.
        public static let apple = Fault("apple")
        /// The network between us: retry later.
        public static let network = Fault("network")
    }

    /// What Apple's answer means.
    public let code: Code
    /// Whose fault it is.
    public let fault: Fault
    /// The HTTP status, when Apple answered.
    public let status: Int?
    /// The host that was called, so that logs show which environment failed (“DeviceCheck's two bits”).
    public let host: String?
    /// What happened, for logs.
    public let message: String

    /// An error from Apple's answer (or from the transport).
    public init(_ code: Code, fault: Fault, status: Int? = nil, host: String? = nil, _ message: String) {
        self.code = code
        self.fault = fault
        self.status = status
        self.host = host
        self.message = message
    }

    /// Whether the same request may succeed later (429 and 5xx, and transport failures).
    public var isRetryable: Bool {
        fault == .apple && code != .invalidReceipt && code != .unexpectedResponse || fault == .network
    }

    public var description: String {
        "\(code) (\(fault) fault\(status.map { ", HTTP \($0)" } ?? "")\(host.map { ", \($0)" } ?? "")): \(message)"
    }

    /// Classifies an error status of DeviceCheck or the receipt endpoint by code, then by body text for 400 and
    /// 401 (“DeviceCheck's two bits”: classify primarily by status; the literal bodies vary).
    static func classify(status: Int, body: String, host: String) -> AppleAPIError {
        let text = body.lowercased()
        let excerpt = sanitizedExcerpt(body)
        func error(_ code: Code, _ fault: Fault) -> AppleAPIError {
            AppleAPIError(code, fault: fault, status: status, host: host, excerpt.isEmpty ? "HTTP \(status)" : excerpt)
        }
        switch status {
        case 400:
            if text.contains("device token") || text.contains("device_token") {
                return error(.badDeviceToken, .deviceToken)
            }
            if text.contains("bits") { return error(.badBits, .request) }
            if text.contains("time stamp") || text.contains("timestamp") { return error(.badTimestamp, .clock) }
            if text.contains("authorization") { return error(.badAuthorizationToken, .credentials) }
            if text.contains("environment") { return error(.incorrectEnvironment, .environment) }
            return error(.badPayload, .request)
        case 401:
            if text.contains("expired") { return error(.authorizationTokenExpired, .credentials) }
            return error(.invalidAuthorizationToken, .credentials)
        case 403: return error(.forbidden, .credentials)
        case 405: return error(.methodNotAllowed, .request)
        case 429: return error(.tooManyRequests, .apple)
        case 500...502, 504...599: return error(.serverError, .apple)
        case 503: return error(.serviceUnavailable, .apple)
        default: return error(.unexpectedResponse, .apple)
        }
    }

    /// At most 200 printable ASCII characters of a body: never echo unbounded or binary text into logs.
    static func sanitizedExcerpt(_ body: String) -> String {
        String(String.UnicodeScalarView(body.unicodeScalars.prefix(200).filter { (0x20..<0x7F).contains($0.value) }))
    }
}
#endif  // AppleServerAPI
