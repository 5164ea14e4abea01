#if HTTP
import AppAttest
package import AppAttestStore
package import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The JSON document that describes a key, wherever a key is answered: an attestation registered (the adapters'
/// route and `appattest serve`'s), a verified assertion and the key routes of `appattest serve` (`openapi.yaml`,
/// `Key`). Written with the one JSON policy of ``AppAttestHTTPResponse/json(_:status:)`` (sorted keys, ISO 8601
/// dates in whole seconds, slashes unescaped); ``json`` writes the same bytes directly for the hot path.
package struct AppAttestKeyDocument: Encodable, Sendable {
    package var keyId: String
    package var userId: String?
    package var appId: String
    package var environment: String
    package var counter: UInt32
    package var riskMetric: Int?
    package var createdAt: Date
    package var receiptUpdatedAt: Date
    package var revokedAt: Date?
    /// After a verification that asked for it: the key's next challenge.
    package var nextChallenge: String?
    package var nextChallengeExpiresAt: Date?

    /// The JSON JSONEncoder writes for this value (sorted keys, ISO 8601 dates, no escaped slashes), written
    /// directly; `KeyDocumentTests` compares the two.
    package var json: [UInt8] {
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
        // Years 1 to 9999 (what the stores can hold); anything else, a damaged row, is written at the nearer end
        // rather than trapping.
        let clamped = min(max(date.timeIntervalSince1970, -62_135_596_800), 253_402_300_799)
        var seconds = time_t(clamped.isNaN ? 0 : clamped.rounded(.down))
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

    /// The document of a stored key.
    package init(_ record: KeyRecord) {
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
#endif  // HTTP
