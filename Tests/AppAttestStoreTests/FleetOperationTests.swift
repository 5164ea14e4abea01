import AppAttest
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import Testing

/// The fleet's key lifecycle on every backend: the attestation budget, keys per user, the audit trail.
@Suite("Fleet operations")
struct FleetOperationTests {
    /// A budget of one attestation per second with a burst of two, and nothing else.
    static let tight = AppAttestService.Policies(
        defaultPolicy: .init(attestationsPerSecond: 1, attestationBurst: 2, maximumKeysPerUser: nil))

    @Test(
        "beyond the App ID's budget an attestation challenge is refused with the wait; assertion challenges are free",
        arguments: Backend.available)
    func attestationBudget(_ backend: Backend) async throws {
        // A clock of its own, far from every other test's: the budget's bucket is shared through the store.
        let harness = try await Harness(
            backend, start: Date(timeIntervalSince1970: 4_000_000_000 + .random(in: 0..<1_000_000)),
            policies: Self.tight)
        defer { harness.close() }
        let budget = try await uniqueBudget(harness)
        let registered = try await budget.register(budget.device())
        _ = try await budget.service.issueChallenge(purpose: AppAttestService.Purpose.attestation)
        do {
            _ = try await budget.service.issueChallenge(purpose: AppAttestService.Purpose.attestation)
            Issue.record("a third attestation challenge within the burst of two was issued")
        } catch {
            #expect(error.code == .attestationBudgetExhausted)
            #expect(
                error.retryAfter.map { $0 > 0 && $0 <= 1 } == true, "wait: \(String(describing: error.retryAfter))")
        }
        // Assertion challenges are not attestations.
        for _ in 0..<5 {
            _ = try await budget.service.issueChallenge(
                purpose: AppAttestService.Purpose.assertion, keyID: registered.keyID)
        }
        // Once the budget has refilled, the next one.
        budget.clock.advance(1)
        _ = try await budget.service.issueChallenge(purpose: AppAttestService.Purpose.attestation)
    }

    @Test("a challenge refused for the challenge limits spends nothing of the budget", arguments: Backend.available)
    func refusedChallengesSpendNothing(_ backend: Backend) async throws {
        let harness = try await Harness(
            backend, start: Date(timeIntervalSince1970: 4_200_000_000 + .random(in: 0..<1_000_000)),
            policies: Self.tight)
        defer { harness.close() }
        let appID = try AppID("BUDGET1234.com.example.limits\(UInt32.random(in: 0...UInt32.max))")
        let clock = harness.clock
        let service = AppAttestService(
            verifier: try Budget.verifier(appID), store: harness.store, challengeLimits: .init(perIssuer: 1),
            policies: Self.tight, now: { clock.now })
        // Issuers of their own: challenges of earlier runs stay outstanding in a shared PostgreSQL database.
        let flooder = "flooder-\(UUID().uuidString)", device = "device-\(UUID().uuidString)"
        _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation, issuer: flooder)
        // The flooder's further requests are refused for its share, and spend nothing: 20 of them.
        for _ in 0..<20 {
            await expectServiceError(.tooManyChallenges) {
                _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation, issuer: flooder)
            }
        }
        // The budget's second token is still there for somebody else.
        _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation, issuer: device)
    }

    @Test("two services on one store share the budget", arguments: Backend.available.filter { $0 != .memory })
    func sharedBudget(_ backend: Backend) async throws {
        let harness = try await Harness(
            backend, start: Date(timeIntervalSince1970: 4_100_000_000 + .random(in: 0..<1_000_000)),
            policies: Self.tight)
        defer { harness.close() }
        let first = try await uniqueBudget(harness)
        // A second service, as another instance would run it: its own connection to the same database.
        let other = try await Backend.reopen(harness.spec!)
        defer { other.close() }
        let second = try first.service(on: other.store)
        var issued = 0
        var refused = 0
        for service in [first.service, second, first.service, second] {
            do {
                _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation)
                issued += 1
            } catch {
                #expect(error.code == .attestationBudgetExhausted)
                refused += 1
            }
        }
        #expect(issued == 2 && refused == 2, "issued \(issued), refused \(refused)")
    }

    @Test(
        "a user's key beyond the limit supersedes the oldest, in the audit trail of both keys",
        arguments: Backend.available)
    func keysPerUser(_ backend: Backend) async throws {
        let harness = try await Harness(
            backend, policies: .init(defaultPolicy: .init(attestationsPerSecond: nil, maximumKeysPerUser: 2)))
        defer { harness.close() }
        let user = "user-\(UUID().uuidString)"
        let oldest = try await harness.registeredDevice(userID: user)
        harness.clock.advance(1)
        let middle = try await harness.registeredDevice(userID: user)
        harness.clock.advance(1)
        // Unbound keys are never superseded, nor counted.
        let unbound = try await harness.registeredDevice()
        harness.clock.advance(1)
        let newest = try await harness.registeredDevice(userID: user)
        let keys = try await harness.service.keys(forUser: user)
        let active = Set(keys.filter { $0.revokedAt == nil }.map(\.keyID))
        #expect(active == [middle.keyID, newest.keyID])
        // Superseded, not revoked: the device registers a new key (action reattest) rather than stay locked out; so
        // on the acceptance's refusal, on the refusal the cache remembers, and on the key's challenge route.
        for attempt in ["the superseded key", "the superseded key, again (cached)"] {
            await expectServiceError(.keySuperseded, attempt) {
                _ = try await harness.service.authenticateAssertion(
                    try oldest.assert(clientData: [1]), clientData: [1], keyID: oldest.keyID)
            }
        }
        await expectServiceError(.keySuperseded, "a challenge for the superseded key") {
            _ = try await harness.service.issueChallenge(
                purpose: AppAttestService.Purpose.assertion, keyID: oldest.keyID)
        }
        let restarted = try harness.freshService()
        await expectServiceError(.keySuperseded, "the superseded key, read by a service that never cached it") {
            _ = try await restarted.issueChallenge(purpose: AppAttestService.Purpose.assertion, keyID: oldest.keyID)
        }
        _ = try await harness.service.authenticateAssertion(
            try middle.assert(clientData: [1]), clientData: [1], keyID: middle.keyID)
        _ = try await harness.service.authenticateAssertion(
            try unbound.assert(clientData: [1]), clientData: [1], keyID: unbound.keyID)
        // A key its owner revoked stays refused as revoked.
        #expect(try await harness.service.revokeKey(middle.keyID, reason: "fraud"))
        for attempt in ["the revoked key", "the revoked key, again (cached)"] {
            await expectServiceError(.keyRevoked, attempt) {
                _ = try await harness.service.authenticateAssertion(
                    try middle.assert(clientData: [2]), clientData: [2], keyID: middle.keyID)
            }
        }
        await expectServiceError(.keyRevoked, "the revoked key, read by a service that never cached it") {
            _ = try await restarted.issueChallenge(purpose: AppAttestService.Purpose.assertion, keyID: middle.keyID)
        }
        let events = try await harness.service.events(ofKey: oldest.keyID)
        #expect(events.map(\.kind) == [.attested, .superseded])
        #expect(events.last?.detail == newest.keyID.base64EncodedString)
        #expect(try await harness.service.events(ofKey: newest.keyID).map(\.kind) == [.attested])
        // Past the events' retention too: the purge keeps revocations. Not on the PostgreSQL database the tests share,
        // where a purge past now would delete the events of tests running beside this one (the statement is the same,
        // and `auditTrail` purges there).
        if backend != .postgres {
            harness.clock.advance(91 * 86_400)
            #expect(try await harness.service.purgeExpiredEvents() > 0)
            #expect(try await harness.service.events(ofKey: oldest.keyID).map(\.kind) == [.superseded])
            await expectServiceError(.keySuperseded, "the superseded key, past the events' retention") {
                _ = try await harness.freshService().issueChallenge(
                    purpose: AppAttestService.Purpose.assertion, keyID: oldest.keyID)
            }
        }
        // A superseded key its owner then revokes: the owner's decision is what the refusal says.
        #expect(try await !harness.service.revokeKey(oldest.keyID, reason: "fraud"))
        await expectServiceError(.keyRevoked, "the superseded key, then revoked") {
            _ = try await harness.service.authenticateAssertion(
                try oldest.assert(clientData: [3]), clientData: [3], keyID: oldest.keyID)
        }
    }

    @Test(
        "revocations, receipt refreshes and refused attestations are in the key's events; retention purges them",
        arguments: Backend.available)
    func auditTrail(_ backend: Backend) async throws {
        // A clock of its own: its purge deletes every event before its cutoff, on a PostgreSQL database shared with
        // tests whose clocks are now (later) and with the challenge purger's (earlier, whose cutoff is before these).
        let harness = try await Harness(backend, start: Date(timeIntervalSince1970: 1_400_000_000))
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        harness.clock.advance(1)
        #expect(
            try await harness.store.updateReceipt(
                device.keyID, receipt: [1, 2, 3], riskMetric: 4, at: harness.clock.now))
        harness.clock.advance(1)
        #expect(try await harness.service.revokeKey(device.keyID, reason: "lost\u{1B}[31m device"))
        #expect(try await !harness.service.revokeKey(device.keyID, reason: "again"))
        // A revoked key's receipt is not replaced: its events end with why it is refused.
        #expect(
            try await !harness.store.updateReceipt(
                device.keyID, receipt: [4, 5, 6], riskMetric: 7, at: harness.clock.now))
        let events = try await harness.service.events(ofKey: device.keyID)
        #expect(events.map(\.kind) == [.attested, .receiptRefreshed, .revoked])
        // The reason is kept without its control character: it can be shown on a terminal.
        #expect(events[2].detail == "lost [31m device" && events[1].detail == "4")
        #expect(events.map(\.time) == [0, 1, 2].map { Date(timeIntervalSince1970: 1_400_000_000 + $0) })
        #expect(try await harness.service.events(ofKey: device.keyID, limit: 1).map(\.kind) == [.revoked])

        // An attestation refused after the object proved to be the key's (a wrong App ID): in the events of a key never
        // stored. One that does not prove the keyId (another key's object under this keyId) writes nothing, so that
        // nobody can write refusals under somebody else's key.
        let refused = try harness.device()
        var (object, challenge) = try await harness.attest(refused)
        let stranger = try harness.device()
        await expectServiceError(.verificationFailed) {
            _ = try await harness.service.registerAttestation(object, keyID: stranger.keyID, challenge: challenge)
        }
        await expectServiceError(.unknownKey, "no key, no events") {
            _ = try await harness.service.events(ofKey: stranger.keyID)
        }
        challenge = try await harness.service.issueChallenge(purpose: AppAttestService.Purpose.attestation).challenge
        var options = SimulatedDevice.AttestationOptions()
        options.appID = try AppID("OTHER12345.com.example.other")
        object = try refused.attest(challenge: challenge, options)
        await expectServiceError(.verificationFailed) {
            _ = try await harness.service.registerAttestation(object, keyID: refused.keyID, challenge: challenge)
        }
        let refusal = try await harness.service.events(ofKey: refused.keyID)
        #expect(refusal.map(\.kind) == [.attestationRefused] && refusal.first?.detail == "appIdMismatch")

        // Past the retention (90 days by default) the purge deletes them, but for the revocation: why the key is
        // refused.
        harness.clock.advance(91 * 86_400)
        #expect(try await harness.service.purgeExpiredEvents() >= 3)
        #expect(try await harness.service.events(ofKey: device.keyID).map(\.kind) == [.revoked])
    }

    @Test("a key of an environment no longer allowed is written to its events once", arguments: Backend.available)
    func environmentNoLongerAllowed(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try harness.device()
        let challenge = try await harness.service.issueChallenge(purpose: AppAttestService.Purpose.attestation)
            .challenge
        var options = SimulatedDevice.AttestationOptions()
        options.environment = .development
        _ = try await harness.service.registerAttestation(
            try device.attest(challenge: challenge, options), keyID: device.keyID, challenge: challenge)
        // The App ID reconfigured for production only, on the same store.
        let productionOnly = AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(
                    apps: [Harness.appID: [.production]], trustAnchor: Harness.authority.trustAnchor)),
            store: harness.store)
        for _ in 0..<3 {
            await expectServiceError(.environmentNotAllowed) {
                _ = try await productionOnly.authenticateAssertion(
                    try device.assert(clientData: [1]), clientData: [1], keyID: device.keyID)
            }
        }
        let events = try await productionOnly.events(ofKey: device.keyID)
        #expect(events.map(\.kind) == [.attested, .environmentNotAllowed] && events.last?.detail == "development")
    }

    // MARK: Helpers

    /// A service on the harness's store for an App ID of its own, so that its budget is not shared with other tests
    /// (nor with earlier runs on the same PostgreSQL database).
    func uniqueBudget(_ harness: Harness) async throws -> Budget {
        let appID = try AppID("BUDGET1234.com.example.budget\(UInt32.random(in: 0...UInt32.max))")
        return try Budget(appID: appID, store: harness.store, clock: harness.clock, policies: Self.tight)
    }

    struct Budget {
        let appID: AppID
        let clock: TestClock
        let policies: AppAttestService.Policies
        let service: AppAttestService

        init(appID: AppID, store: any AppAttestStore, clock: TestClock, policies: AppAttestService.Policies) throws {
            self.appID = appID
            self.clock = clock
            self.policies = policies
            self.service = AppAttestService(
                verifier: try Self.verifier(appID), store: store, policies: policies, now: { clock.now })
        }

        static func verifier(_ appID: AppID) throws -> AppAttestVerifier {
            try AppAttestVerifier(
                configuration: .init(apps: [appID: [.production]], trustAnchor: Harness.authority.trustAnchor))
        }

        func service(on store: any AppAttestStore) throws -> AppAttestService {
            let clock = clock
            return AppAttestService(
                verifier: try Self.verifier(appID), store: store, policies: policies, now: { clock.now })
        }

        func device() throws -> SimulatedDevice {
            try SimulatedDevice(authority: Harness.authority, appID: appID)
        }

        func attest(_ device: SimulatedDevice, on service: AppAttestService? = nil) async throws
            -> (object: [UInt8], challenge: [UInt8])
        {
            let challenge = try await (service ?? self.service).issueChallenge(
                purpose: AppAttestService.Purpose.attestation
            ).challenge
            return (try device.attest(challenge: challenge), challenge)
        }

        func register(_ device: SimulatedDevice) async throws -> KeyRecord {
            let (object, challenge) = try await attest(device)
            return try await service.registerAttestation(object, keyID: device.keyID, challenge: challenge)
        }
    }
}
