#if AppleServerAPI
public import AppAttest
public import AsyncHTTPClient
public import Foundation
public import Logging

/// Apple's DeviceCheck server API: two bits per device and team, and device-token validation (“DeviceCheck's two
/// bits”).
///
/// The environment is chosen explicitly and never switched behind your back: a development token sent to
/// production (or the reverse) fails, and the error names the host that answered (“DeviceCheck's two bits”).
public struct DeviceCheckClient: Sendable {
    /// The DeviceCheck host of an environment: `https://api.development.devicecheck.apple.com` or
    /// `https://api.devicecheck.apple.com`.
    public static func endpoint(for environment: AppAttestEnvironment) -> AppleEndpoint {
        switch environment {
        case .development: return AppleEndpoint(trusted: "https://api.development.devicecheck.apple.com")
        case .production: return AppleEndpoint(trusted: "https://api.devicecheck.apple.com")
        }
    }

    /// The two bits of a device, or their absence.
    public enum BitState: Sendable, Hashable {
        /// No bits were ever set for this device (Apple answers 200 with `Failed to find bit state`).
        case notSet
        /// The bits, and the month they were last set (`YYYY-MM`, month precision).
        case set(bit0: Bool, bit1: Bool, lastUpdated: YearMonth?)
    }

    /// A month, as `last_update_time` gives it.
    public struct YearMonth: Sendable, Hashable, CustomStringConvertible {
        /// The year of the last update.
        public let year: Int
        /// The month of the last update (Apple gives no day).
        public let month: Int
        public var description: String { String(format: "%04d-%02d", year, month) }

        init?(_ text: String) {
            let parts = text.split(separator: "-")
            guard parts.count == 2, parts[0].count == 4, parts[1].count == 2, let year = Int(parts[0]),
                let month = Int(parts[1]), (1...12).contains(month)
            else { return nil }
            self.year = year
            self.month = month
        }
    }

    private let tokens: ProviderTokenSource
    private let transport: Transport
    private let now: @Sendable () -> Date

    /// - Parameters:
    ///   - tokens: the provider token source (share one per credentials).
    ///   - environment: the DeviceCheck host to call.
    ///   - endpoint: another base URL instead (a stand-in server in tests).
    ///   - httpClient: the client to use; by default `HTTPClient.appleAPI`, which follows no redirect.
    ///   - timeout: per attempt, in seconds.
    public init(
        tokens: ProviderTokenSource, environment: AppAttestEnvironment, endpoint: AppleEndpoint? = nil,
        httpClient: HTTPClient = .appleAPI, timeout: TimeInterval = 10, retry: RetryPolicy = .init(),
        logger: Logger = Logger(label: "AppleDeviceAPI.DeviceCheck", factory: { _ in SwiftLogNoOpLogHandler() }),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.tokens = tokens
        self.transport = Transport(
            client: httpClient, endpoint: endpoint ?? Self.endpoint(for: environment), timeout: timeout, retry: retry,
            logger: logger)
        self.now = now
    }

    /// `POST /v1/query_two_bits`.
    public func queryTwoBits(deviceToken: String) async throws(AppleAPIError) -> BitState {
        let response = try await call("/v1/query_two_bits", deviceToken: deviceToken, bits: nil)
        if let data = response.body.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let bit0 = object["bit0"] as? Bool, let bit1 = object["bit1"] as? Bool
        {
            return .set(
                bit0: bit0, bit1: bit1, lastUpdated: (object["last_update_time"] as? String).flatMap(YearMonth.init))
        }
        // A 200 with a text body means no bits were ever set (“DeviceCheck's two bits”).
        let text = response.body.lowercased()
        if text.contains("failed to find bit state") || text.contains("bit state not found") { return .notSet }
        throw AppleAPIError(
            .unexpectedResponse, fault: .apple, status: response.status, host: transport.endpoint.host,
            "200 with a body that is neither bits nor 'Failed to find bit state': \(AppleAPIError.sanitizedExcerpt(response.body))"
        )
    }

    /// `POST /v1/update_two_bits`, sending both bits (the effect of omitting one is undocumented, “DeviceCheck's two
    /// bits”).
    public func updateTwoBits(deviceToken: String, bit0: Bool, bit1: Bool) async throws(AppleAPIError) {
        _ = try await call("/v1/update_two_bits", deviceToken: deviceToken, bits: (bit0, bit1))
    }

    /// `POST /v1/validate_device_token`.
    public func validateDeviceToken(_ deviceToken: String) async throws(AppleAPIError) {
        _ = try await call("/v1/validate_device_token", deviceToken: deviceToken, bits: nil)
    }

    /// The largest device token accepted before calling Apple (real ones are about 2–3 KB of Base64).
    public static let maximumDeviceTokenLength = 16 * 1024

    private func call(_ path: String, deviceToken: String, bits: (Bool, Bool)?) async throws(AppleAPIError)
        -> Transport.Response
    {
        // The token is the app's: check its shape here rather than spend a call (standard Base64, no line breaks).
        guard !deviceToken.isEmpty, deviceToken.utf8.count <= Self.maximumDeviceTokenLength,
            Data(base64Encoded: deviceToken) != nil
        else {
            throw AppleAPIError(
                .badDeviceToken, fault: .deviceToken, host: transport.endpoint.host,
                "the device token is not standard Base64")
        }
        let tokens = self.tokens
        let now = self.now
        let response = try await transport.post(
            path, authorization: { () async throws(AppleAPIError) -> String in "Bearer \(try await tokens.token())" },
            contentType: "application/json",
            body: { () throws(AppleAPIError) -> [UInt8] in
                // A fresh transaction id and timestamp (milliseconds, “DeviceCheck's two bits”) for every attempt.
                var object: [String: Any] = [
                    "device_token": deviceToken, "transaction_id": UUID().uuidString,
                    "timestamp": Int64((now().timeIntervalSince1970 * 1000).rounded(.down)),
                ]
                if let bits {
                    object["bit0"] = bits.0
                    object["bit1"] = bits.1
                }
                guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else {
                    throw AppleAPIError(.badPayload, fault: .request, "could not encode the request")
                }
                return Array(data)
            })
        guard response.status == 200 else {
            let error = AppleAPIError.classify(
                status: response.status, body: response.body, host: transport.endpoint.host)
            if error.code == .authorizationTokenExpired { await tokens.invalidate() }
            throw error
        }
        return response
    }
}
#endif  // AppleServerAPI
