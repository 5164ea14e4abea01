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

    struct RevokeRequest: Decodable {
        var reason: String?
    }

    struct EventsResponse: Encodable {
        struct Event: Encodable {
            var kind: String
            var time: Date
            var detail: String?
        }
        var keyId: String
        var events: [Event]
    }

    /// The answer of the verification operation for a refusal that report-only enforcement lets through.
    struct ReportedRefusal: Encodable {
        var enforced = false
        var code: String
        var action: String
        var status: Int
        var title: String
        var keyId: String?

        init(_ report: AppAttestReport) {
            code = report.problem.code
            action = report.problem.action.rawValue
            status = report.problem.status.code
            title = report.problem.title
            keyId = report.keyID?.base64EncodedString
        }
    }

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
