#if HTTP
import AppAttest
import AppAttestHTTP
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import Testing

@Suite("Enrollment routes: what a challenge request counts against")
struct ChallengeRateTests {
    static let authority = try! TestCertificateAuthority(name: "Rates")
    static let appID = try! AppID("RATES12345.com.example.rates")

    /// Statuses of `count` challenge requests with `body` from `caller`.
    static func statuses(
        _ routes: AppAttestEnrollmentRoutes, caller: String, body: String, count: Int
    ) async -> [Int] {
        var statuses: [Int] = []
        for _ in 0..<count {
            do {
                let response = try await routes.respond(to: .challenge, caller: caller, userID: nil) { _ in
                    Array(body.utf8)
                }
                statuses.append(response.status.code)
            } catch {
                statuses.append(error.status.code)
            }
        }
        return statuses
    }

    @Test(
        "devices behind one address each fetch their keys' challenges, which strangers cannot spend; keyless ones and unknown keys count for the address"
    )
    func keysBehindOneAddress() async throws {
        let verifier = try AppAttestVerifier(
            configuration: .init(apps: [Self.appID: [.production]], trustAnchor: Self.authority.trustAnchor))
        let service = AppAttestService(verifier: verifier, store: MemoryAppAttestStore())
        var devices: [SimulatedDevice] = []
        for _ in 0..<2 {
            let device = try SimulatedDevice(authority: Self.authority, appID: Self.appID)
            let challenge = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation).challenge
            _ = try await service.registerAttestation(
                try device.attest(challenge: challenge), keyID: device.keyID, challenge: challenge)
            devices.append(device)
        }
        // A clock that stands still: nothing refills.
        let routes = AppAttestEnrollmentRoutes(
            service: service, rateLimiter: AppAttestRateLimiter(ratePerSecond: 10, burst: 20, now: { 0 }))
        func keyed(_ keyID: String) -> String { #"{"purpose":"assertion","keyId":"\#(keyID)"}"# }
        // Two devices behind one address, 15 challenges each: all served (before, the address's 20 were shared).
        for device in devices {
            let statuses = await Self.statuses(
                routes, caller: "192.0.2.1", body: keyed(device.keyID.base64EncodedString), count: 15)
            #expect(statuses == Array(repeating: 200, count: 15))
        }
        // A stranger elsewhere who knows the first device's keyId spends a bucket of its own, not the device's.
        let stranger = await Self.statuses(
            routes, caller: "192.0.2.9", body: keyed(devices[0].keyID.base64EncodedString), count: 21)
        #expect(stranger == Array(repeating: 200, count: 20) + [429])
        let mine = await Self.statuses(
            routes, caller: "192.0.2.1", body: keyed(devices[0].keyID.base64EncodedString), count: 6)
        #expect(mine == Array(repeating: 200, count: 5) + [429])
        // The address's own bucket is whole but for the key's refusal just above: keyless challenges spend it.
        let keyless = await Self.statuses(routes, caller: "192.0.2.1", body: #"{"purpose":"attestation"}"#, count: 20)
        #expect(keyless == Array(repeating: 200, count: 19) + [429])
        // Unknown keys count against the address, which is then refused whatever it asks.
        var unknown: [Int] = []
        for index in 0..<21 {
            let keyID = try KeyID(rawValue: [UInt8](repeating: UInt8(index), count: 32))
            unknown += await Self.statuses(
                routes, caller: "192.0.2.2", body: keyed(keyID.base64EncodedString), count: 1)
        }
        #expect(unknown.prefix(20).allSatisfy { $0 != 200 && $0 != 429 } && unknown.last == 429, "\(unknown)")
        #expect(
            await Self.statuses(
                routes, caller: "192.0.2.2", body: keyed(devices[1].keyID.base64EncodedString), count: 1) == [429])
    }
}
#endif  // HTTP
