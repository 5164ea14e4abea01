import AppAttest
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import Testing

/// The same contract on every backend: nothing is replayed, nothing is lost.
@Suite("Store contract")
struct StoreContractTests {
    @Test(
        "a challenge is consumed once; the same attestation posted again gets its first answer",
        arguments: Backend.available)
    func challengeReuse(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try harness.device()
        let (object, challenge) = try await harness.attest(device)
        let registered = try await harness.service.registerAttestation(
            object, keyID: device.keyID, challenge: challenge)
        // The same attestation again (its answer lost): the first answer, nothing stored twice.
        let again = try await harness.service.registerAttestation(object, keyID: device.keyID, challenge: challenge)
        #expect(again.keyID == registered.keyID && again.key.publicKey == registered.key.publicKey)
        #expect(again.receipt == registered.receipt && again.userID == registered.userID)
        #expect(abs(again.createdAt.timeIntervalSince(registered.createdAt)) < 1)
        // By another user: a used challenge.
        await expectServiceError(.challengeUnknown, "another user") {
            _ = try await harness.service.registerAttestation(
                object, keyID: device.keyID, challenge: challenge, userID: "someone-else")
        }
        // Long after the challenge's lifetime (an app suspended mid-request posts it at its next launch): still the
        // first answer, so that the app keeps its registered key rather than making another.
        harness.clock.advance(3_600)
        let later = try await harness.service.registerAttestation(object, keyID: device.keyID, challenge: challenge)
        #expect(later.keyID == registered.keyID && abs(later.createdAt.timeIntervalSince(registered.createdAt)) < 1)
        // Not for a revoked key.
        #expect(try await harness.service.revokeKey(device.keyID))
        await expectServiceError(.challengeUnknown, "revoked") {
            _ = try await harness.service.registerAttestation(object, keyID: device.keyID, challenge: challenge)
        }
        await expectServiceError(.challengeUnknown, "never issued") {
            _ = try await harness.service.registerAttestation(
                object, keyID: device.keyID, challenge: [UInt8](repeating: 7, count: 32))
        }
    }

    @Test("an expired challenge is refused, and purged", arguments: Backend.available)
    func expiredChallenge(_ backend: Backend) async throws {
        // Later than the purger test's clock (AuditFindingTests), whose purger, sharing a PostgreSQL database, would
        // otherwise delete this challenge before it is presented; earlier than every other test's.
        let harness = try await Harness(backend, start: Date(timeIntervalSince1970: 1_300_000_000))
        defer { harness.close() }
        let device = try harness.device()
        let (object, challenge) = try await harness.attest(device)
        harness.clock.advance(301)
        await expectServiceError(.challengeExpired) {
            _ = try await harness.service.registerAttestation(object, keyID: device.keyID, challenge: challenge)
        }
        _ = try await harness.service.issueChallenge(purpose: "x")
        harness.clock.advance(301)
        #expect(try await harness.service.purgeExpiredChallenges() >= 1)
    }

    @Test("challenges are bound to their purpose, key and user", arguments: Backend.available)
    func challengeBindings(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try harness.device()
        let wrongPurpose = try await harness.service.issueChallenge(purpose: AppAttestService.Purpose.assertion)
            .challenge
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = Date()
        await expectServiceError(.challengeMismatch, "purpose") {
            _ = try await harness.service.registerAttestation(
                try device.attest(challenge: wrongPurpose, options), keyID: device.keyID, challenge: wrongPurpose)
        }
        let forAlice = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.attestation, userID: "alice"
        ).challenge
        await expectServiceError(.challengeMismatch, "user") {
            _ = try await harness.service.registerAttestation(
                try device.attest(challenge: forAlice, options), keyID: device.keyID, challenge: forAlice, userID: "bob"
            )
        }
        // An assertion challenge reserved for another key.
        let registered = try await harness.registeredDevice()
        let other = try await harness.registeredDevice()
        let reserved = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: other.keyID
        ).challenge
        let clientData = reserved + Array("|request".utf8)
        await expectServiceError(.challengeMismatch, "key") {
            _ = try await harness.service.authenticateAssertion(
                try registered.assert(clientData: clientData), clientData: try .opaque(clientData, challenge: reserved),
                keyID: registered.keyID)
        }
        // A challenge that is not in the signed client data.
        let issued = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: registered.keyID
        ).challenge
        await expectServiceError(.challengeMismatch, "not in client data") {
            _ = try await harness.service.authenticateAssertion(
                try registered.assert(clientData: [1, 2, 3]), clientData: try .opaque([1, 2, 3], challenge: issued),
                keyID: registered.keyID)
        }
    }

    @Test("assertions advance the counter; rollback and replay are refused", arguments: Backend.available)
    func counters(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let data: [UInt8] = [1]
        var options = SimulatedDevice.AssertionOptions()
        options.counter = 5
        let five = try device.assert(clientData: data, options)
        #expect(
            try await harness.service.authenticateAssertion(five, clientData: data, keyID: device.keyID).record.key
                .counter
                == 5)
        await expectServiceError(.verificationFailed, "replay") {
            _ = try await harness.service.authenticateAssertion(five, clientData: data, keyID: device.keyID)
        }
        options.counter = 3
        let three = try device.assert(clientData: data, options)
        await expectServiceError(.verificationFailed, "rollback") {
            _ = try await harness.service.authenticateAssertion(three, clientData: data, keyID: device.keyID)
        }
        #expect(try await harness.store.key(device.keyID)?.key.counter == 5)
        // With a challenge: consumed once.
        let challenge = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: device.keyID
        ).challenge
        let clientData = challenge + Array("|request".utf8)
        options.counter = 6
        let six = try device.assert(clientData: clientData, options)
        _ = try await harness.service.authenticateAssertion(
            six, clientData: try .opaque(clientData, challenge: challenge), keyID: device.keyID)
        options.counter = 7
        let seven = try device.assert(clientData: clientData, options)
        await expectServiceError(.challengeUnknown, "challenge reused with a higher counter") {
            _ = try await harness.service.authenticateAssertion(
                seven, clientData: try .opaque(clientData, challenge: challenge), keyID: device.keyID)
        }
    }

    @Test("64 concurrent assertions with the same counter: exactly one is accepted", arguments: Backend.available)
    func concurrentSameCounter(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let data: [UInt8] = [9, 9]
        let assertion = try device.assert(clientData: data)
        let service = harness.service
        let keyID = device.keyID
        let outcomes = await withTaskGroup(of: AppAttestServiceError.Code?.self) { group in
            for _ in 0..<64 {
                group.addTask {
                    do {
                        _ = try await service.authenticateAssertion(assertion, clientData: data, keyID: keyID)
                        return nil
                    } catch let error as AppAttestServiceError { return error.code } catch { return .storeUnavailable }
                }
            }
            var collected: [AppAttestServiceError.Code?] = []
            for await outcome in group { collected.append(outcome) }
            return collected
        }
        #expect(outcomes.filter { $0 == nil }.count == 1, "\(outcomes)")
        #expect(outcomes.allSatisfy { $0 == nil || $0 == .counterReplayed || $0 == .verificationFailed }, "\(outcomes)")
        #expect(try await harness.store.key(device.keyID)?.key.counter == 1)
    }

    @Test("a key belongs to one user; a user may have several keys", arguments: Backend.available)
    func users(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let alice = "alice-\(UUID().uuidString)"
        let device = try await harness.registeredDevice(userID: alice)
        let (again, challenge) = try await harness.attest(device)
        await expectServiceError(.keyBoundToAnotherUser) {
            _ = try await harness.service.registerAttestation(
                again, keyID: device.keyID, challenge: challenge, userID: "mallory")
        }
        let (once, secondChallenge) = try await harness.attest(device, userID: alice)
        await expectServiceError(.keyAlreadyRegistered) {
            _ = try await harness.service.registerAttestation(
                once, keyID: device.keyID, challenge: secondChallenge, userID: alice)
        }
        // A reinstall rotates the key: the user now has two.
        _ = try await harness.registeredDevice(userID: alice)
        let keys = try await harness.service.keys(forUser: alice)
        #expect(keys.count == 2)
        #expect(
            keys.allSatisfy {
                $0.key.counter == 0 && $0.key.appID == Harness.appID && $0.key.environment == .production
            })
    }

    @Test("revoked keys verify nothing; receipts are replaced", arguments: Backend.available)
    func revocationAndReceipts(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        #expect(try await harness.service.revokeKey(device.keyID))
        #expect(try await !harness.service.revokeKey(device.keyID))
        await expectServiceError(.keyRevoked) {
            _ = try await harness.service.authenticateAssertion(
                try device.assert(clientData: [1]), clientData: [1], keyID: device.keyID)
        }
        #expect(
            try await harness.store.acceptAssertion(
                .init(keyID: device.keyID, counter: 100, counterPolicy: .strictlyIncreasing, challenge: nil))
                == .keyRevoked)
        await expectServiceError(.unknownKey) {
            _ = try await harness.service.authenticateAssertion(
                [0xA0], clientData: [1], keyID: try KeyID(rawValue: [UInt8](repeating: 1, count: 32)))
        }
        // A revoked key's receipt is not replaced.
        let before = try await harness.store.key(device.keyID)
        #expect(
            try await !harness.store.updateReceipt(
                device.keyID, receipt: [1, 2, 3], riskMetric: 4, at: harness.clock.now))
        let record = try await harness.store.key(device.keyID)
        #expect(record?.receipt == before?.receipt && record?.riskMetric == before?.riskMetric)
        #expect(record?.revokedAt != nil)
    }

    @Test("a failed verification stores nothing", arguments: Backend.available)
    func failedVerification(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try harness.device()
        let challenge = try await harness.service.issueChallenge(purpose: AppAttestService.Purpose.attestation)
            .challenge
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = Date()
        options.counter = 1
        await expectServiceError(.verificationFailed) {
            _ = try await harness.service.registerAttestation(
                try device.attest(challenge: challenge, options), keyID: device.keyID, challenge: challenge)
        }
        #expect(try await harness.store.key(device.keyID) == nil)
    }
}
