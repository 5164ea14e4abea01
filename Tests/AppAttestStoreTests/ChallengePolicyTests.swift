import AppAttest
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import Testing

/// Challenges reserved for a key or a user, their bounds and purge, and App IDs that accept production only, on every
/// backend.
@Suite("Challenges and environments: reservations, bounds, purge, production-only App IDs")
struct ChallengePolicyTests {
    /// A clientData that carries `challenge`, as an app would build it.
    func clientData(_ challenge: [UInt8]) -> [UInt8] {
        challenge + Array("GET /profile\n".utf8)
    }

    @Test("a development key stops passing assertions once its App ID is production-only", arguments: Backend.available)
    func environmentAtAssertion(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try SimulatedDevice(authority: Harness.authority, appID: Harness.appID, environment: .development)
        let (object, challenge) = try await harness.attest(device)
        _ = try await harness.service.registerAttestation(object, keyID: device.keyID, challenge: challenge)
        _ = try await harness.service.authenticateAssertion(
            try device.assert(clientData: [1]), clientData: [1], keyID: device.keyID)

        // The App ID is reconfigured: production only. Same store.
        let productionOnly = AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(
                    apps: [Harness.appID: [.production]], trustAnchor: Harness.authority.trustAnchor)),
            store: harness.store)
        await expectServiceError(.environmentNotAllowed) {
            _ = try await productionOnly.authenticateAssertion(
                try device.assert(clientData: [2]), clientData: [2], keyID: device.keyID)
        }
        #expect(try await harness.store.key(device.keyID)?.key.counter == 1, "the refused assertion stored nothing")
    }

    @Test(
        "the challenge is checked at its place, never searched for: an oversized challenge is refused before any work",
        arguments: Backend.available)
    func typedBinding(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        // The audit's case: 64 KiB of client data and a 1 KiB "challenge", with a valid assertion over it. Searching
        // for the challenge cost 4 s of CPU per request, and nothing was consumed, so it could be replayed at will.
        let longChallenge = [UInt8](repeating: 0x61, count: 1024)
        let huge = [UInt8](repeating: 0x61, count: 64 * 1024 - 1) + [0x62]
        let hostile = try device.assert(clientData: huge)
        #expect(throws: AppAttestError.self) { try AppAttestClientData.opaque(huge, challenge: longChallenge) }
        await expectServiceError(.malformedBinding, "the same bytes as opaque client data of the service's") {
            _ = try await harness.service.authenticateAssertion(
                hostile, clientData: huge + [UInt8](repeating: 0x61, count: 2), keyID: device.keyID)
        }
        #expect(try await harness.store.key(device.keyID)?.key.counter == 0, "nothing was stored")
        // A genuine challenge that is inside the client data but not at its place is refused, and stays unused.
        let issued = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: device.keyID
        ).challenge
        let inside = Array("prefix".utf8) + issued
        await expectServiceError(.challengeMismatch) {
            _ = try await harness.service.authenticateAssertion(
                try device.assert(clientData: inside), clientData: try .opaque(inside, challenge: issued),
                keyID: device.keyID)
        }
        let accepted = try await harness.service.authenticateAssertion(
            try device.assert(clientData: issued + [1]), clientData: try .opaque(issued + [1], challenge: issued),
            keyID: device.keyID)
        #expect(try await harness.store.key(device.keyID)?.key.counter == accepted.record.key.counter)
        #expect(accepted.record.key.counter > 0)
        // Methods and paths are validated before they are bound.
        for (method, path) in [
            ("GET\u{0}", "/a"), ("GET", "/a b"), ("GET", "/a\u{0}b"), ("GET", "/a\nb"), ("", "/"), ("GET", "a"),
            ("GET", "/" + String(repeating: "a", count: 8192)), (String(repeating: "G", count: 21), "/"),
        ] {
            #expect(
                throws: AppAttestError.self, "\(method.debugDescription) \(path.prefix(20).debugDescription)"
            ) {
                _ = try AppAttestClientData.request(
                    method: method, pathAndQuery: path, bodySHA256: [UInt8](repeating: 0, count: 32),
                    challenge: issued)
            }
        }
        _ = try AppAttestClientData.request(
            method: "PATCH", pathAndQuery: "/a%20b/c%2Fd/?q=1&r=%E2%82%AC",
            bodySHA256: [UInt8](repeating: 0, count: 32),
            challenge: issued)
    }

    @Test("a challenge reserved for key B cannot be burned by key A", arguments: Backend.available)
    func reservationCheckedBeforeConsumption(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let a = try await harness.registeredDevice()
        let b = try await harness.registeredDevice()
        let forB = try await harness.service.issueChallenge(purpose: AppAttestService.Purpose.assertion, keyID: b.keyID)
            .challenge
        await expectServiceError(.challengeMismatch) {
            _ = try await harness.service.authenticateAssertion(
                try a.assert(clientData: clientData(forB)), clientData: try .opaque(clientData(forB), challenge: forB),
                keyID: a.keyID)
        }
        // Still there for B.
        let accepted = try await harness.service.authenticateAssertion(
            try b.assert(clientData: clientData(forB)), clientData: try .opaque(clientData(forB), challenge: forB),
            keyID: b.keyID)
        #expect(accepted.record.key.counter == 1)
    }

    @Test("an assertion challenge reserved for a user is usable by that user's keys only", arguments: Backend.available)
    func userBoundAssertionChallenge(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let alice = try await harness.registeredDevice(userID: "alice-\(UUID())")
        let aliceID = try #require(try await harness.store.key(alice.keyID)?.userID)
        let mallory = try await harness.registeredDevice(userID: "mallory-\(UUID())")
        let forAlice = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, userID: aliceID
        ).challenge
        await expectServiceError(.challengeMismatch) {
            _ = try await harness.service.authenticateAssertion(
                try mallory.assert(clientData: clientData(forAlice)),
                clientData: try .opaque(clientData(forAlice), challenge: forAlice),
                keyID: mallory.keyID)
        }
        let accepted = try await harness.service.authenticateAssertion(
            try alice.assert(clientData: clientData(forAlice)),
            clientData: try .opaque(clientData(forAlice), challenge: forAlice),
            keyID: alice.keyID)
        #expect(accepted.record.key.counter == 1)
    }

    @Test(
        "unused challenges per key and per user stay within their limits; expired ones stop counting",
        arguments: Backend.available)
    func outstandingBound(_ backend: Backend) async throws {
        // Later than any other test's clock: the purger test, sharing the database, deletes what expired by its own
        // clock, which must not include these challenges.
        let harness = try await Harness(backend, start: Date(timeIntervalSince1970: 2_000_000_000))
        defer { harness.close() }
        let clock = harness.clock
        let service = AppAttestService(
            verifier: harness.service.verifier, store: harness.store,
            challengeLimits: .init(perKey: 2, perUser: 3, total: 1_000_000), now: { clock.now })
        let key = try await harness.registeredDevice().keyID
        let user = "user-\(UUID())"
        func outstanding() async throws -> (key: Int, user: Int) {
            (
                try await harness.store.outstandingChallenges(keyID: key, userID: nil, now: clock.now),
                try await harness.store.outstandingChallenges(keyID: nil, userID: user, now: clock.now)
            )
        }
        // Beyond the limit a new challenge replaces the oldest: never more outstanding, never a refusal.
        for _ in 0..<5 { _ = try await service.issueChallenge(purpose: "assertion", keyID: key) }
        for _ in 0..<5 { _ = try await service.issueChallenge(purpose: "attestation", userID: user) }
        #expect(try await outstanding() == (2, 3))
        clock.advance(301)
        #expect(try await outstanding() == (0, 0))
        _ = try await service.issueChallenge(purpose: "assertion", keyID: key)
        _ = try await service.issueChallenge(purpose: "attestation", userID: user)
        #expect(try await outstanding() == (1, 1))
    }

    @Test(
        "challenges reserved for keys do not count against the total: devices holding them never stop registrations",
        // Not on the shared PostgreSQL database, whose total holds other tests' challenges (some expire far ahead).
        arguments: Backend.available.filter { $0 != .postgres })
    func totalLeavesKeyChallenges(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let clock = harness.clock
        let service = AppAttestService(
            verifier: harness.service.verifier, store: harness.store,
            challengeLimits: .init(perKey: 4, perUser: 3, total: 3), now: { clock.now })
        let device = try await harness.registeredDevice()
        // Each device holds challenges of its own (its next ones): as many as the total.
        for _ in 0..<3 { _ = try await service.issueChallenge(purpose: "assertion", keyID: device.keyID) }
        // New devices' challenges are still issued, up to the total of those reserved for no key.
        for _ in 0..<3 { _ = try await service.issueChallenge(purpose: "assertion") }
        await #expect(throws: AppAttestServiceError.self) { try await service.issueChallenge(purpose: "assertion") }
    }

    /// A service on the harness's store whose keys and users hold few challenges: 4 per key, 3 per user.
    private static func smallLimits(_ harness: Harness) -> AppAttestService {
        AppAttestService(
            verifier: harness.service.verifier, store: harness.store,
            challengeLimits: .init(perKey: 4, perUser: 3, total: 1_000_000))
    }

    @Test(
        "challenges reserved for a user do not evict the ones reserved for the user's keys",
        arguments: Backend.available)
    func userChallengesLeaveKeyChallenges(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let user = "user-\(UUID())"
        let device = try await harness.registeredDevice(userID: user)
        let service = Self.smallLimits(harness)
        // A challenge reserved for the user's key, by a caller that may: then more challenges for the user alone
        // (another caller's, perhaps of another App ID) than the user's limit.
        let forKey = try await service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: device.keyID, userID: user
        ).challenge
        for _ in 0..<5 {
            _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.assertion, userID: user)
        }
        #expect(try await harness.store.outstandingChallenges(keyID: nil, userID: user, now: Date()) <= 4)
        // The key's own challenge is still there, and its request goes through.
        let data = clientData(forKey)
        let accepted = try await service.authenticateAssertion(
            try device.assert(clientData: data), clientData: try .opaque(data, challenge: forKey), keyID: device.keyID)
        #expect(accepted.record.key.counter == 1)
    }

    @Test(
        "challenges one issuer reserves for a user are not evicted by another issuer's for that user; its own are",
        arguments: Backend.available)
    func userChallengesPerIssuer(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let user = "user-\(UUID())"
        let service = Self.smallLimits(harness)
        let assertion = AppAttestService.Purpose.assertion
        // Tenant B's backend reserves one for its user; tenant A's token, which may name any user, asks for many more
        // for the same user.
        let mine = try await service.issueChallenge(purpose: assertion, userID: user, issuer: "caller:b").challenge
        var others: [[UInt8]] = []
        for _ in 0..<5 {
            others.append(
                try await service.issueChallenge(purpose: assertion, userID: user, issuer: "caller:a").challenge)
        }
        #expect(try await harness.store.challenge(mine) != nil, "another issuer's challenges evicted B's")
        // A's own stay bounded by the user's limit: its oldest went.
        var kept = 0
        for challenge in others where try await harness.store.challenge(challenge) != nil { kept += 1 }
        #expect(kept == 3)
        #expect(try await harness.store.challenge(others[0]) == nil)
        #expect(
            try await harness.store.consumeChallenge(mine, purpose: assertion, keyID: nil, userID: user) != nil,
            "B's challenge is still usable")
    }

    @Test("the service's background work deletes expired challenges by itself", arguments: Backend.available)
    func purger(_ backend: Backend) async throws {
        let harness = try await Harness(backend, start: Date(timeIntervalSince1970: 1_200_000_000))
        defer { harness.close() }
        let issued = try await harness.service.issueChallenge(purpose: "attestation").challenge
        harness.clock.advance(301)
        let purging = Task {
            await harness.service.run(challengePurgeInterval: .milliseconds(50))
        }
        defer { purging.cancel() }
        var gone = false
        let start = ContinuousClock.now
        while !gone, ContinuousClock.now - start < .seconds(60) {
            try await Task.sleep(for: .milliseconds(50))
            gone = try await harness.store.challenge(issued) == nil
        }
        #expect(gone)
    }
}
