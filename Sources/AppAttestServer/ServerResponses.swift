#if Service
import AppAttest
import AppAttestWire
import AppAttestHummingbird
import AppAttestStore
import AppAttestLifecycle
import AppAttestHTTP
import AppleDeviceAPI
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

extension AppAttestServer {
    // MARK: Request and response bodies (openapi.yaml)

    struct RevokeResponse: Encodable {
        var keyId: String
        var revoked: Bool
    }

    struct RefreshResponse: Encodable {
        var keyId: String
        /// refreshed, notModified or noData.
        var outcome: String
        var riskMetric: Int?
        var receiptCreatedAt: Date?
    }

    static let notConfigured = AppAttestProblem(
        status: .serviceUnavailable, code: "notConfigured", title: "No App ID is configured on this server")
}
#endif  // Service
