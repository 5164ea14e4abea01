#if AppleServerAPI
public import AppAttest
public import AsyncHTTPClient
public import Foundation
public import Logging

/// Exchanges a stored App Attest receipt for a fresh one carrying the risk metric (“Receipts and the risk metric”).
public struct ReceiptRefreshClient: Sendable {
    /// The receipt host of an environment (keys and receipts never cross environments):
    /// `https://data-development.appattest.apple.com` or `https://data.appattest.apple.com`.
    public static func endpoint(for environment: AppAttestEnvironment) -> AppleEndpoint {
        switch environment {
        case .development: return AppleEndpoint(trusted: "https://data-development.appattest.apple.com")
        case .production: return AppleEndpoint(trusted: "https://data.appattest.apple.com")
        }
    }

    /// How the provider token is sent. Apple's sample shows the bare token; the DeviceCheck page uses `Bearer`
    /// (“Receipts and the risk metric”; Apple documents neither form): the bare form is the default, the other is one
    /// setting away.
    public enum AuthorizationStyle: Sendable, Hashable {
        case bareToken
        case bearer
    }

    /// The result of a refresh.
    public enum Outcome: Sendable, Hashable {
        /// 200: a new receipt, already validated (signature, chain, App ID, key, type RECEIPT, environment, age).
        case refreshed(AppAttestReceipt)
        /// 304: called before the previous receipt's not-before; keep it.
        case notModified
        /// 404: Apple holds no data for this key any more (about 30 days without attestation); keep the last
        /// good receipt (“DeviceCheck's two bits”).
        case noData
    }

    private let tokens: ProviderTokenSource
    private let transport: Transport
    private let validator: AppAttestReceiptValidator
    private let environment: AppAttestEnvironment
    private let style: AuthorizationStyle

    /// - Parameters:
    ///   - validator: validates refreshed receipts (Apple Root CA - G3 and the system clock by default).
    public init(
        tokens: ProviderTokenSource, environment: AppAttestEnvironment, endpoint: AppleEndpoint? = nil,
        validator: AppAttestReceiptValidator, authorizationStyle: AuthorizationStyle = .bareToken,
        httpClient: HTTPClient = .appleAPI, timeout: TimeInterval = 10, retry: RetryPolicy = .init(),
        logger: Logger = Logger(label: "AppleDeviceAPI.ReceiptRefresh", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.tokens = tokens
        self.transport = Transport(
            client: httpClient, endpoint: endpoint ?? Self.endpoint(for: environment), timeout: timeout, retry: retry,
            logger: logger)
        self.validator = validator
        self.environment = environment
        self.style = authorizationStyle
    }

    /// `POST /v1/attestationData` with the Base64 of `receipt`.
    /// - Parameters:
    ///   - receipt: the stored receipt (from the attestation or the last refresh).
    ///   - appID: the App ID the key was attested for.
    ///   - publicKey: the attested key; the new receipt must carry it.
    public func refresh(_ receipt: [UInt8], appID: AppID, publicKey: AttestedPublicKey) async throws(AppleAPIError)
        -> Outcome
    {
        guard !receipt.isEmpty, receipt.count <= 64 * 1024 else {
            throw AppleAPIError(.badPayload, fault: .request, "a receipt of \(receipt.count) bytes")
        }
        let tokens = self.tokens
        let style = self.style
        let body = Array(Data(receipt).base64EncodedString().utf8)
        let response = try await transport.post(
            "/v1/attestationData",
            authorization: { () async throws(AppleAPIError) -> String in
                let token = try await tokens.token()
                return style == .bearer ? "Bearer \(token)" : token
            },
            contentType: nil, body: { () throws(AppleAPIError) -> [UInt8] in body })
        let host = transport.endpoint.host
        switch response.status {
        case 200:
            let text = response.body.filter { !$0.isWhitespace }
            guard let data = Data(base64Encoded: text) else {
                throw AppleAPIError(
                    .unexpectedResponse, fault: .apple, status: 200, host: host, "200 without a Base64 receipt")
            }
            do {
                let validated = try validator.validate(
                    data,
                    expecting: .init(
                        appID: appID, publicKey: publicKey, type: .receipt,
                        environment: environment, freshlyReceived: true))
                return .refreshed(validated)
            } catch {
                throw AppleAPIError(
                    .invalidReceipt, fault: .apple, status: 200, host: host,
                    "the refreshed receipt does not validate: \(error)")
            }
        case 304: return .notModified
        case 404: return .noData
        default:
            let error = AppleAPIError.classify(status: response.status, body: response.body, host: host)
            if error.code == .authorizationTokenExpired { await tokens.invalidate() }
            throw error
        }
    }
}
#endif  // AppleServerAPI
