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
    func key(_ keyID: KeyID) async -> AppAttestHTTPResponse {
        guard let service else { return .problem(Self.notConfigured) }
        do { return .json(AppAttestKeyDocument(try await service.key(keyID))) } catch {
            return .problem(Self.problem(error))
        }
    }

    func events(_ keyID: KeyID, limit: Int) async -> AppAttestHTTPResponse {
        guard let service else { return .problem(Self.notConfigured) }
        guard (1...1000).contains(limit) else { return .problem(.malformed("limit is from 1 to 1000")) }
        do {
            let events = try await service.events(ofKey: keyID, limit: limit)
            return .json(
                EventsResponse(
                    keyId: keyID.base64EncodedString,
                    events: events.map { .init(kind: $0.kind.rawValue, time: $0.time, detail: $0.detail) }))
        } catch {
            return .problem(Self.problem(error))
        }
    }

    func revoke(_ keyID: KeyID, reason: String?) async -> AppAttestHTTPResponse {
        guard let service else { return .problem(Self.notConfigured) }
        do {
            let changed = try await service.revokeKey(keyID, reason: reason)
            logger.info("key revoked", metadata: ["keyId": "\(keyID)", "changed": "\(changed)"])
            return .json(RevokeResponse(keyId: keyID.base64EncodedString, revoked: true))
        } catch {
            return .problem(Self.problem(error))
        }
    }

    func refresh(_ keyID: KeyID) async -> AppAttestHTTPResponse {
        guard let service else { return .problem(Self.notConfigured) }
        guard let refresher else {
            return .problem(
                .init(
                    status: .serviceUnavailable, code: "receiptRefreshNotConfigured",
                    title: "No Apple provider key is configured"))
        }
        do {
            switch try await service.refreshReceipt(keyID, using: refresher) {
            case .refreshed(let receipt):
                return .json(
                    RefreshResponse(
                        keyId: keyID.base64EncodedString, outcome: "refreshed", riskMetric: receipt.riskMetric,
                        receiptCreatedAt: receipt.creationTime))
            case .notModified:
                return .json(RefreshResponse(keyId: keyID.base64EncodedString, outcome: "notModified"))
            case .noData:
                return .json(RefreshResponse(keyId: keyID.base64EncodedString, outcome: "noData"))
            }
        } catch {
            if error.code == .receiptRefreshFailed {
                let apple = error.underlying as? AppleAPIError
                let code = apple.map { "apple.\($0.code)" } ?? "apple.failed"
                logger.warning("receipt refresh failed", metadata: ["keyId": "\(keyID)", "error": "\(code)"])
                // Apple's side or the network: worth a retry later; anything else needs a person.
                return .problem(
                    .init(
                        status: .badGateway, code: code, title: "Apple's receipt service refused",
                        retryAfter: apple?.isRetryable == true ? 60 : nil))
            }
            return .problem(Self.problem(error))
        }
    }

    /// The problem for a service refusal on the key routes: an unknown key is 404, a revoked one 409.
    static func problem(_ error: AppAttestServiceError) -> AppAttestProblem {
        switch error.code {
        case .unknownKey: return unknownKey
        case .keyRevoked: return .init(status: .conflict, code: "keyRevoked", title: "The key was revoked")
        case .keySuperseded:
            return .init(
                status: .conflict, code: "keySuperseded", title: "The key was replaced by a newer key of its user",
                action: .reattest)
        default: return AppAttestProblem(error)
        }
    }

    func health() async -> Response {
        // A shorter deadline than requests get: a load balancer's probe must learn quickly that this instance
        // cannot serve, and not hold a connection while the store's own deadline runs out. A server without an App
        // ID cannot serve either.
        let deadline = Duration.nanoseconds(Int64(configuration.readinessTimeoutSeconds * 1e9))
        let service = service
        let ready = await readiness.isReady { () async -> Bool in
            guard let service else { return false }
            do { try await service.checkStore(within: deadline) } catch { return false }
            return true
        }
        guard ready else {
            return Response(.json(["status": "unavailable", "store": "unavailable"], status: .serviceUnavailable))
        }
        return Response(.json(["status": "ok", "store": "ok"]))
    }

    static let unknownKey = AppAttestProblem(
        status: .notFound, code: "unknownKey", title: "No such key", action: .reattest)
    static let forbidden = AppAttestProblem(
        status: .forbidden, code: "forbidden", title: "This caller's token does not allow this operation")

    /// 403 when the caller's token lacks `permission`.
    static func refusal(_ context: ServerRequestContext, _ permission: ServerConfiguration.Permission)
        -> AppAttestHTTPResponse?
    {
        context.scope?.permissions.contains(permission) == true ? nil : .problem(forbidden)
    }

    /// 404, as if the key did not exist, when the caller is limited to App IDs that do not include the key's.
    func outOfScope(_ keyID: KeyID, _ caller: Caller?) async -> AppAttestProblem? {
        guard let caller, caller.appIDs != nil else { return nil }
        guard let service else { return Self.notConfigured }
        do { return caller.covers(try await service.appID(ofKey: keyID)) ? nil : Self.unknownKey } catch {
            return Self.problem(error)
        }
    }
}
#endif  // Service
