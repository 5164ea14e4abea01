import AppAttest
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import Testing

/// What the service accepts as a user identifier and as opaque client data, and when it issues a next challenge: the
/// same on every store.
@Suite("Service: user identifiers, opaque client data, next challenges")
struct ServiceInputTests {
    @Test(
        "a user identifier with a control character is refused before any store sees it", arguments: Backend.available)
    func controlCharactersInUserID(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        for hostile in [
            "alice\u{0}evil", "alice\u{1B}[2J", "line\nbreak", "c1\u{85}", "", String(repeating: "u", count: 257),
        ] {
            await expectServiceError(.invalidUserID, hostile.debugDescription) {
                _ = try await harness.service.issueChallenge(
                    purpose: AppAttestService.Purpose.attestation, userID: hostile)
            }
            await expectServiceError(.invalidUserID, hostile.debugDescription) {
                _ = try await harness.service.keys(forUser: hostile)
            }
        }
        // Registration refuses it before consuming the challenge: the device can register with it afterwards.
        let device = try harness.device()
        let (object, challenge) = try await harness.attest(device)
        let alice = "alice-\(UUID().uuidString)"
        await expectServiceError(.invalidUserID) {
            _ = try await harness.service.registerAttestation(
                object, keyID: device.keyID, challenge: challenge, userID: alice + "\u{0}evil")
        }
        _ = try await harness.service.registerAttestation(
            object, keyID: device.keyID, challenge: challenge, userID: alice)
        // Unicode that is not a control character is an identifier like any other.
        _ = try await harness.service.issueChallenge(purpose: AppAttestService.Purpose.attestation, userID: "zoë 🙂")
        #expect(try await harness.service.keys(forUser: alice).map(\.keyID) == [device.keyID])
    }

    @Test(
        "opaque client data that begins with a canonical binding's domain is refused, its challenge left unused",
        arguments: Backend.available)
    func canonicalBindingAsOpaqueData(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let challenge = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: device.keyID
        ).challenge
        let hash = AppAttestSHA256.hash(Array("{}".utf8))
        let bound = try AppAttestClientData.request(
            method: "POST", pathAndQuery: "/orders", bodySHA256: hash, challenge: challenge
        ).bytes
        let timed = try AppAttestClientData.request(
            method: "POST", pathAndQuery: "/orders", bodySHA256: hash, timestampMilliseconds: 1
        ).bytes
        for clientData in [bound, timed] {
            let assertion = try device.assert(clientData: clientData)
            await expectServiceError(.malformedBinding) {
                _ = try await harness.service.authenticateAssertion(
                    assertion, clientData: clientData, keyID: device.keyID)
            }
        }
        #expect(try await harness.store.key(device.keyID)?.key.counter == 0, "nothing was accepted")
        // Opaque data that merely mentions the domain elsewhere is the app's own business.
        let mentions = Array("note: app-attest-request-v1".utf8) + [0]
        _ = try await harness.service.authenticateAssertion(
            try device.assert(clientData: mentions), clientData: mentions, keyID: device.keyID)
        // The bound request's challenge is still there to be used by the request it was issued for.
        _ = try await harness.service.authenticateAssertion(
            try device.assert(clientData: bound),
            clientData: try .request(method: "POST", pathAndQuery: "/orders", bodySHA256: hash, challenge: challenge),
            keyID: device.keyID)
    }

    @Test(
        "a next challenge is issued only to a request that consumed one, so a key's challenges stay within its limit",
        arguments: Backend.available)
    func nextChallengeOnlyForAConsumedOne(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let limit = harness.service.challengeLimits.perKey
        // Opaque client data without a challenge, asking for a next one, many more times than the key's limit.
        for index in 0..<(limit + 4) {
            let data = Array("request \(index)".utf8)
            let authenticated = try await harness.service.authenticateAssertion(
                try device.assert(clientData: data), clientData: try .opaque(data), keyID: device.keyID,
                issuingNextChallenge: true)
            #expect(authenticated.nextChallenge == nil, "request \(index) consumed no challenge")
        }
        #expect(
            try await harness.store.outstandingChallenges(keyID: device.keyID, userID: nil, now: harness.clock.now) == 0
        )
        // Nor does one that consumes a challenge not reserved for this key (it would turn an issuer's challenge into
        // one outside the issuer's share).
        let unreserved = try await harness.service.issueChallenge(purpose: AppAttestService.Purpose.assertion)
            .challenge
        let withUnreserved = unreserved + Array("request".utf8)
        #expect(
            try await harness.service.authenticateAssertion(
                try device.assert(clientData: withUnreserved),
                clientData: try .opaque(withUnreserved, challenge: unreserved),
                keyID: device.keyID, issuingNextChallenge: true
            ).nextChallenge == nil)
        // The key's own challenge requests are still served.
        var challenge = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: device.keyID
        ).challenge
        // A request that consumes one gets the next, and the key's outstanding challenges stay at one.
        for index in 0..<(limit + 4) {
            let data = challenge + Array("request \(index)".utf8)
            let authenticated = try await harness.service.authenticateAssertion(
                try device.assert(clientData: data), clientData: try .opaque(data, challenge: challenge),
                keyID: device.keyID, issuingNextChallenge: true)
            challenge = try #require(authenticated.nextChallenge).challenge
        }
        #expect(
            try await harness.store.outstandingChallenges(keyID: device.keyID, userID: nil, now: harness.clock.now) == 1
        )
    }

    /// A service on the harness's store with other challenge limits.
    static func service(_ harness: Harness, _ limits: AppAttestService.ChallengeLimits) -> AppAttestService {
        let clock = harness.clock
        return AppAttestService(
            verifier: harness.service.verifier, store: harness.store, challengeLimits: limits, now: { clock.now })
    }

    @Test(
        "challenges reserved for no key count against the total; a full total refuses all but a key's; a key's needs a live key",
        arguments: Backend.available)
    func totalCountsUnreservedChallenges(_ backend: Backend) async throws {
        // Far in the future for this clock, so that other tests' challenges on a shared PostgreSQL have expired and
        // do not count while this one runs.
        let harness = try await Harness(backend, start: Date().addingTimeInterval(1_000 * 365 * 86_400))
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let counting = try #require(harness.store as? any CountsUnreservedChallenges)
        let before = try await counting.outstandingUnreservedChallenges(now: harness.clock.now)
        let service = Self.service(harness, .init(total: before + 2))
        _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation)
        _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.assertion, keyID: device.keyID)
        // A key's challenge does not count: a user's is still issued, and reaches the total.
        _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation, userID: "someone")
        // The total is reached: a challenge reserved for a registered key is still issued (bounded by the key's own
        // limit), so that a flood of unreserved challenges cannot stop registered devices' requests; and neither a
        // user's nor an unreserved one is.
        _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.assertion, keyID: device.keyID)
        await expectServiceError(.tooManyChallenges, "reserved for a user") {
            _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation, userID: "someone")
        }
        await expectServiceError(.tooManyChallenges, "unreserved") {
            _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation)
        }
        // A key that is not registered, or revoked, gets no reservation (and the store no row).
        let stranger = try harness.device()
        await expectServiceError(.unknownKey) {
            _ = try await harness.service.issueChallenge(
                purpose: AppAttestService.Purpose.assertion, keyID: stranger.keyID)
        }
        #expect(try await harness.service.revokeKey(device.keyID))
        await expectServiceError(.keyRevoked) {
            _ = try await harness.service.issueChallenge(
                purpose: AppAttestService.Purpose.assertion, keyID: device.keyID)
        }
        #expect(
            try await harness.store.outstandingChallenges(keyID: stranger.keyID, userID: nil, now: harness.clock.now)
                == 0)
    }

    @Test(
        "one issuer holds at most its share; others are still served", arguments: Backend.available)
    func perIssuerBound(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let service = Self.service(harness, .init(perIssuer: 3))
        let greedy = "address:\(UUID().uuidString)"
        for _ in 0..<3 {
            _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation, issuer: greedy)
        }
        await expectServiceError(.tooManyChallenges) {
            _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation, issuer: greedy)
        }
        // A challenge reserved for a registered key is not held to the issuer's share (a backend asking for its
        // devices' challenges is one issuer), unless it is an attestation challenge, which spends the budget.
        let device = try await harness.registeredDevice()
        _ = try await service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: device.keyID, issuer: greedy)
        await expectServiceError(.tooManyChallenges) {
            _ = try await service.issueChallenge(
                purpose: AppAttestService.Purpose.attestation, keyID: device.keyID, issuer: greedy)
        }
        _ = try await service.issueChallenge(
            purpose: AppAttestService.Purpose.attestation, issuer: "address:\(UUID().uuidString)")
        // What it holds frees up as it is used.
        let held = try await service.issueChallenge(
            purpose: AppAttestService.Purpose.attestation, issuer: "x:\(UUID().uuidString)")
        #expect(
            try await harness.store.consumeChallenge(
                held.challenge, purpose: AppAttestService.Purpose.attestation, keyID: nil, userID: nil) != nil)
    }

    @Test(
        "asking for a key's or a user's challenges cannot lock them out: a new one replaces their oldest",
        arguments: Backend.available)
    func reservationsReplaceTheOldest(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let service = Self.service(harness, .init(perKey: 2, perUser: 2))
        var issued: [[UInt8]] = []
        for _ in 0..<5 {
            // Later expiries order them: the clock moves a little between them.
            harness.clock.advance(1)
            issued.append(
                try await service.issueChallenge(purpose: AppAttestService.Purpose.assertion, keyID: device.keyID)
                    .challenge)
        }
        #expect(
            try await harness.store.outstandingChallenges(keyID: device.keyID, userID: nil, now: harness.clock.now) == 2
        )
        // The newest two are usable, the older ones are gone.
        for (index, challenge) in issued.enumerated() {
            let stored = try await harness.store.challenge(challenge)
            #expect((stored != nil) == (index >= 3), "challenge \(index)")
        }
        let user = "user-\(UUID().uuidString)"
        for _ in 0..<4 {
            harness.clock.advance(1)
            _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation, userID: user)
        }
        #expect(try await harness.store.outstandingChallenges(keyID: nil, userID: user, now: harness.clock.now) == 2)
    }
}
