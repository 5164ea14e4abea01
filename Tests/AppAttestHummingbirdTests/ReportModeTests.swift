#if Hummingbird
import AppAttest
import AppAttestWire
import AppAttestHTTP
import AppAttestHummingbird
import AppAttestStore
import AppAttestLifecycle
import AppAttestTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

/// Report-only enforcement behind the Hummingbird middleware: refusals are recorded, requests run unverified.
@Suite("Hummingbird middleware in report mode")
struct ReportModeTests {
    typealias M = MiddlewareTests

    /// A protected route that says whether its request was verified, and why not.
    static func makeRouter(_ service: AppAttestService) -> Router<AppAttestRequestContext> {
        let router = Router(context: AppAttestRequestContext.self)
        router.addRoutes(AppAttestRoutes(service: service).collection, atPath: "appattest")
        router.group("api").add(middleware: AppAttestMiddleware(service: service, maximumBodySize: 4096))
            .post("order") { _, context in
                if let device = context.identity { return "verified \(device.counter)" }
                return "unverified \(AppAttestReport.current?.problem.code ?? "-")"
            }
        return router
    }

    @Test("report: a replay, a request without headers and a forged one run unverified; enforce refuses them")
    func reportThenEnforce() async throws {
        let service = AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(appID: M.appID, environment: .production, trustAnchor: M.authority.trustAnchor)),
            store: MemoryAppAttestStore(), policies: .init(defaultPolicy: .init(enforcement: .report)))
        let device = try SimulatedDevice(authority: M.authority, appID: M.appID)
        let tests = M()
        try await Application(router: Self.makeRouter(service)).test(.router) { client in
            try await tests.register(client, device)
            let challenge = try await tests.challenge(client, purpose: "assertion", keyID: device.keyID)
            let headers = try tests.signed(device, path: "/api/order", body: "", challenge: challenge)
            try await client.execute(uri: "/api/order", method: .post, headers: headers) { response in
                #expect(response.status == .ok && String(buffer: response.body) == "verified 1")
            }
            // The same request again, a replay: reported, and the route runs unverified.
            try await client.execute(uri: "/api/order", method: .post, headers: headers) { response in
                #expect(String(buffer: response.body) == "unverified counterNotIncreasing")
            }
            // An app version without App Attest: no headers at all.
            try await client.execute(uri: "/api/order", method: .post) { response in
                #expect(String(buffer: response.body) == "unverified missingAssertion")
            }
            // Switched to enforce (a configuration reload): the same requests are refused.
            service.replacePolicies(.init())
            try await client.execute(uri: "/api/order", method: .post, headers: headers) { response in
                #expect(response.status == .conflict && tests.code(response) == "counterNotIncreasing")
            }
            try await client.execute(uri: "/api/order", method: .post) { response in
                #expect(response.status == .unauthorized && tests.code(response) == "missingAssertion")
            }
        }
    }

    @Test(
        "a route is reported only when every App ID it serves reports: a keyId cannot choose the lenient policy; a key of an App ID a route does not serve is refused"
    )
    func perAppID() async throws {
        let other = try AppID("OTHER12345.com.example.other")
        let service = AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(
                    apps: [M.appID: [.production], other: [.production]], trustAnchor: M.authority.trustAnchor)),
            store: MemoryAppAttestStore(),
            policies: .init(apps: [M.appID: .init(enforcement: .report)]))
        let router = Router(context: AppAttestRequestContext.self)
        router.addRoutes(AppAttestRoutes(service: service).collection, atPath: "appattest")
        // One route for both apps (enforced: the other App ID enforces), one for the reporting app alone.
        for (path, appIDs) in [("both", Set<AppID>?.none), ("reporting", Set([M.appID]))] {
            router.group(RouterPath(path)).add(
                middleware: AppAttestMiddleware(service: service, maximumBodySize: 4096, appIDs: appIDs)
            )
            .post("order") { _, context in
                if let device = context.identity { return "verified \(device.counter)" }
                return "unverified \(AppAttestReport.current?.problem.code ?? "-")"
            }
        }
        // A route of the other app alone (enforced): a key of the first is not its to admit, however valid.
        router.group("other").add(
            middleware: AppAttestMiddleware(service: service, maximumBodySize: 4096, appIDs: [other])
        )
        .post("order") { _, context in "verified \(context.identity?.appID?.description ?? "-")" }
        let device = try SimulatedDevice(authority: M.authority, appID: M.appID)
        let otherDevice = try SimulatedDevice(authority: M.authority, appID: other)
        let tests = M()
        try await Application(router: router).test(.router) { client in
            try await tests.register(client, device)
            try await tests.register(client, otherDevice)
            var refusedChallenge: [UInt8]?
            for (signer, status, body) in [
                (device, HTTPResponse.Status.forbidden, ""), (otherDevice, .ok, "verified \(other)"),
            ] {
                let challenge = try await tests.challenge(client, purpose: "assertion", keyID: signer.keyID)
                let headers = try tests.signed(signer, path: "/other/order", body: "", challenge: challenge)
                try await client.execute(uri: "/other/order", method: .post, headers: headers) { response in
                    #expect(response.status == status)
                    if status == .ok { #expect(String(buffer: response.body) == body) }
                    if status != .ok { #expect(tests.code(response) == "appIdNotAllowed") }
                }
                if status != .ok { refusedChallenge = challenge }
            }
            // The refusal used nothing: its challenge is still the device's, and its counter was not stored.
            let counterBefore = try await service.key(device.keyID).key.counter
            let reused = try tests.signed(
                device, path: "/both/order", body: "", challenge: try #require(refusedChallenge))
            try await client.execute(uri: "/both/order", method: .post, headers: reused) { response in
                #expect(response.status == .ok && String(buffer: response.body).hasPrefix("verified"))
            }
            #expect(counterBefore == 0, "the refused assertion's counter was not stored")
            // On the reporting app's route, another app's key is a refusal like the others: reported, no identity.
            let challenge = try await tests.challenge(client, purpose: "assertion", keyID: otherDevice.keyID)
            let headers = try tests.signed(otherDevice, path: "/reporting/order", body: "", challenge: challenge)
            try await client.execute(uri: "/reporting/order", method: .post, headers: headers) { response in
                #expect(String(buffer: response.body) == "unverified appIdNotAllowed")
            }
            for path in ["/both/order", "/reporting/order"] {
                let challenge = try await tests.challenge(client, purpose: "assertion", keyID: device.keyID)
                let headers = try tests.signed(device, path: path, body: "", challenge: challenge)
                _ = try await client.execute(uri: path, method: .post, headers: headers)
                // The replay of a key of the reporting App ID, and a request without headers.
                try await client.execute(uri: path, method: .post, headers: headers) { response in
                    if path == "/both/order" {
                        #expect(response.status == .conflict && tests.code(response) == "counterNotIncreasing")
                    } else {
                        #expect(String(buffer: response.body) == "unverified counterNotIncreasing")
                    }
                }
                try await client.execute(uri: path, method: .post) { response in
                    if path == "/both/order" {
                        #expect(response.status == .unauthorized && tests.code(response) == "missingAssertion")
                    } else {
                        #expect(String(buffer: response.body) == "unverified missingAssertion")
                    }
                }
            }
        }
    }
}
#endif  // Hummingbird
