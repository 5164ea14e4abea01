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

    struct KeyResponse: Encodable {
        var keyId: String
        var userId: String?
        var appId: String
        var environment: String
        var counter: UInt32
        var riskMetric: Int?
        var createdAt: Date
        var receiptUpdatedAt: Date
        var revokedAt: Date?
        /// After a verification that asked for it: the key's next challenge.
        var nextChallenge: String?
        var nextChallengeExpiresAt: Date?

        /// The JSON JSONEncoder writes for this value (sorted keys, ISO 8601 dates, no escaped slashes), written
        /// directly; `KeyResponseTests` compares the two.
        var json: [UInt8] {
            var out: [UInt8] = []
            out.reserveCapacity(320)
            out.append(UInt8(ascii: "{"))
            func name(_ name: StaticString) {
                if out.count > 1 { out.append(UInt8(ascii: ",")) }
                out.append(UInt8(ascii: "\""))
                out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
                out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
            }
            name("appId")
            JSONText.quote(appId, into: &out)
            name("counter")
            out.append(contentsOf: String(counter).utf8)
            name("createdAt")
            Self.iso8601(createdAt, into: &out)
            name("environment")
            JSONText.quote(environment, into: &out)
            name("keyId")
            JSONText.quote(keyId, into: &out)
            if let nextChallenge {
                name("nextChallenge")
                JSONText.quote(nextChallenge, into: &out)
            }
            if let nextChallengeExpiresAt {
                name("nextChallengeExpiresAt")
                Self.iso8601(nextChallengeExpiresAt, into: &out)
            }
            name("receiptUpdatedAt")
            Self.iso8601(receiptUpdatedAt, into: &out)
            if let revokedAt {
                name("revokedAt")
                Self.iso8601(revokedAt, into: &out)
            }
            if let riskMetric {
                name("riskMetric")
                out.append(contentsOf: String(riskMetric).utf8)
            }
            if let userId {
                name("userId")
                JSONText.quote(userId, into: &out)
            }
            out.append(UInt8(ascii: "}"))
            return out
        }

        /// `"yyyy-MM-ddTHH:mm:ssZ"` in UTC, quoted, as JSONEncoder's `.iso8601` writes (whole seconds, rounded down).
        static func iso8601(_ date: Date, into out: inout [UInt8]) {
            var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
            var parts = tm()
            gmtime_r(&seconds, &parts)
            func digits(_ value: Int32, _ count: Int) {
                var divisor: Int32 = 1
                for _ in 1..<count { divisor *= 10 }
                while divisor > 0 {
                    out.append(UInt8(ascii: "0") + UInt8((value / divisor) % 10))
                    divisor /= 10
                }
            }
            out.append(UInt8(ascii: "\""))
            digits(parts.tm_year + 1900, 4)
            out.append(UInt8(ascii: "-"))
            digits(parts.tm_mon + 1, 2)
            out.append(UInt8(ascii: "-"))
            digits(parts.tm_mday, 2)
            out.append(UInt8(ascii: "T"))
            digits(parts.tm_hour, 2)
            out.append(UInt8(ascii: ":"))
            digits(parts.tm_min, 2)
            out.append(UInt8(ascii: ":"))
            digits(parts.tm_sec, 2)
            out.append(contentsOf: [UInt8(ascii: "Z"), UInt8(ascii: "\"")])
        }

        init(_ record: KeyRecord) {
            keyId = record.keyID.base64EncodedString
            userId = record.userID
            appId = record.key.appID.rawValue
            environment = record.key.environment.rawValue
            counter = record.key.counter
            riskMetric = record.riskMetric
            createdAt = record.createdAt
            receiptUpdatedAt = record.receiptUpdatedAt
            revokedAt = record.revokedAt
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
