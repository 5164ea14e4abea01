import AppAttest
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import Testing

/// Out-of-order assertions with a reorder window, and the single transaction that accepts an assertion, on every
/// store (<doc:RunningTheVerificationService>, “Counters”).
@Suite("Reorder window and one transaction per assertion")
struct ReorderWindowTests {
    /// The rule every store applies, checked against a set of accepted counters.
    @Test("the window rule accepts each counter once, in any order within the window, nothing older")
    func rule() {
        var random = SystemRandomNumberGenerator()
        for window in [1, 2, 8, 64] {
            var highest: UInt32 = 0
            var seen: UInt64 = 0
            var accepted: Set<UInt32> = [0]
            for _ in 0..<5_000 {
                let top = max(highest, 1)
                let counter = UInt32.random(in: (top > 80 ? top - 80 : 1)...(top + 70), using: &random)
                let expected =
                    !accepted.contains(counter)
                    && (counter > highest || (window > 1 && highest - counter < UInt32(window)))
                let result = AppAttestVerifier.CounterPolicy.reorderWindow(window).advance(
                    highest: highest, seen: seen, counter: counter)
                #expect((result != nil) == expected, "window \(window) highest \(highest) counter \(counter)")
                if let (newHighest, newSeen) = result {
                    highest = newHighest
                    seen = newSeen
                    accepted.insert(counter)
                }
            }
        }
    }

    static func service(_ harness: Harness, window: Int) -> AppAttestService {
        let clock = harness.clock
        return AppAttestService(
            verifier: harness.service.verifier, store: harness.store, counterPolicy: .reorderWindow(window),
            now: { clock.now })
    }

    static func assertion(_ device: SimulatedDevice, counter: UInt32, data: [UInt8]) throws -> [UInt8] {
        var options = SimulatedDevice.AssertionOptions()
        options.counter = counter
        return try device.assert(clientData: data, options)
    }

    @Test(
        "64 distinct counters, shuffled and sent at once: all accepted; every replay refused",
        arguments: Backend.available)
    func shuffledCounters(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let service = Self.service(harness, window: 64)
        let data: [UInt8] = [4, 2]
        let counters = Array(UInt32(1)...64).shuffled()
        let assertions = try counters.map { try Self.assertion(device, counter: $0, data: data) }
        let keyID = device.keyID
        func sendAll() async -> [AppAttestServiceError.Code?] {
            await withTaskGroup(of: AppAttestServiceError.Code?.self) { group in
                for assertion in assertions {
                    group.addTask {
                        do {
                            _ = try await service.authenticateAssertion(assertion, clientData: data, keyID: keyID)
                            return nil
                        } catch let error as AppAttestServiceError { return error.code } catch {
                            return .storeUnavailable
                        }
                    }
                }
                var outcomes: [AppAttestServiceError.Code?] = []
                for await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
        }
        let first = await sendAll()
        #expect(first.allSatisfy { $0 == nil }, "\(first.compactMap { $0 })")
        #expect(try await harness.store.key(device.keyID)?.key.counter == 64)
        let replays = await sendAll()
        #expect(replays.allSatisfy { $0 == .counterReplayed || $0 == .verificationFailed }, "\(replays)")
        #expect(!replays.contains { $0 == nil })
        // Below the window: the highest is 64, so 0 (the attestation's) and anything under 1 are out; a new counter
        // far ahead moves the window, and what fell out of it is refused.
        _ = try await service.authenticateAssertion(
            try Self.assertion(device, counter: 200, data: data), clientData: data, keyID: keyID)
        await expectServiceError(.verificationFailed, "below the window") {
            _ = try await service.authenticateAssertion(
                try Self.assertion(device, counter: 136, data: data), clientData: data, keyID: keyID)
        }
        _ = try await service.authenticateAssertion(
            try Self.assertion(device, counter: 137, data: data), clientData: data, keyID: keyID)
        await expectServiceError(.counterReplayed) {
            _ = try await service.authenticateAssertion(
                try Self.assertion(device, counter: 137, data: data), clientData: data, keyID: keyID)
        }
    }

    /// Nil when `attempt` succeeds, else the service's refusal (any other error counts as a failed verification).
    static func outcome(_ attempt: () async throws -> some Any) async -> AppAttestServiceError.Code? {
        do {
            _ = try await attempt()
            return nil
        } catch let error as AppAttestServiceError {
            return error.code
        } catch {
            return .verificationFailed
        }
    }

    @Test(
        "with a window, 64 concurrent assertions with one counter: exactly one is accepted",
        arguments: Backend.available)
    func sameCounterInWindow(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let service = Self.service(harness, window: 64)
        let data: [UInt8] = [7]
        // Move the highest to 50 first, so that counter 20 is inside the window, below the highest.
        _ = try await service.authenticateAssertion(
            try Self.assertion(device, counter: 50, data: data), clientData: data, keyID: device.keyID)
        let assertion = try Self.assertion(device, counter: 20, data: data)
        let keyID = device.keyID
        // Each attempt ends accepted, refused as a replay, or (on a loaded machine, when the pool is exhausted)
        // unavailable; nothing else.
        let outcomes = await withTaskGroup(of: AppAttestServiceError.Code?.self) { group in
            for _ in 0..<64 {
                group.addTask {
                    await Self.outcome {
                        try await service.authenticateAssertion(assertion, clientData: data, keyID: keyID)
                    }
                }
            }
            var outcomes: [AppAttestServiceError.Code?] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
        let accepted = outcomes.count(where: { $0 == nil })
        let unavailable = outcomes.count(where: { $0 == .storeUnavailable })
        #expect(accepted + unavailable + outcomes.count(where: { $0 == .counterReplayed }) == 64, "\(outcomes)")
        #expect(accepted <= 1, "the same counter was accepted \(accepted) times")
        if unavailable == 0 { #expect(accepted == 1) }
        if accepted == 0 {
            // Every attempt timed out: one may still have been committed, or none; a calm retry settles which.
            let retried = await Self.outcome {
                try await service.authenticateAssertion(assertion, clientData: data, keyID: keyID)
            }
            #expect(retried == nil || retried == .counterReplayed)
        }
        // The counter is now spent: one more is a replay.
        await expectServiceError(.counterReplayed) {
            _ = try await service.authenticateAssertion(assertion, clientData: data, keyID: keyID)
        }
        #expect(try await harness.store.key(device.keyID)?.key.counter == 50)
    }

    @Test("the strict policy refuses what arrives out of order", arguments: Backend.available)
    func strictRefusesReordering(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let data: [UInt8] = [1]
        _ = try await harness.service.authenticateAssertion(
            try Self.assertion(device, counter: 7, data: data), clientData: data, keyID: device.keyID)
        await expectServiceError(.verificationFailed) {
            _ = try await harness.service.authenticateAssertion(
                try Self.assertion(device, counter: 5, data: data), clientData: data, keyID: device.keyID)
        }
        // And the store itself, asked directly with window 1, refuses it too (the cache plays no part).
        #expect(
            try await harness.store.acceptAssertion(
                .init(keyID: device.keyID, counter: 6, counterPolicy: .strictlyIncreasing, challenge: nil))
                == .counterRefused(highestCounter: 7))
    }

    @Test(
        "challenge and counter in one transaction: a refused counter leaves the challenge unused",
        arguments: Backend.available)
    func oneTransaction(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let first = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: device.keyID
        ).challenge
        let data = first + [1]
        _ = try await harness.service.authenticateAssertion(
            try Self.assertion(device, counter: 5, data: data), clientData: try .opaque(data, challenge: first),
            keyID: device.keyID)
        // A second challenge, bound by an assertion whose counter was already used: refused, challenge kept.
        let second = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: device.keyID
        ).challenge
        let replayed = second + [2]
        #expect(
            try await harness.store.acceptAssertion(
                .init(
                    keyID: device.keyID, counter: 5, counterPolicy: .strictlyIncreasing,
                    challenge: .init(
                        challenge: second, purpose: AppAttestService.Purpose.assertion, userID: nil,
                        now: harness.clock.now))) == .counterRefused(highestCounter: 5))
        #expect(try await harness.store.challenge(second) != nil, "the refused acceptance consumed nothing")
        _ = try await harness.service.authenticateAssertion(
            try Self.assertion(device, counter: 6, data: replayed),
            clientData: try .opaque(replayed, challenge: second),
            keyID: device.keyID)
        #expect(try await harness.store.challenge(second) == nil)
        #expect(try await harness.store.key(device.keyID)?.key.counter == 6)
        // An expired challenge refuses the counter too: nothing moves.
        let third = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: device.keyID
        ).challenge
        harness.clock.advance(301)
        await expectServiceError(.challengeExpired) {
            let late = third + [3]
            _ = try await harness.service.authenticateAssertion(
                try Self.assertion(device, counter: 7, data: late), clientData: try .opaque(late, challenge: third),
                keyID: device.keyID)
        }
        #expect(try await harness.store.key(device.keyID)?.key.counter == 6)
    }

    @Test("a batch in one transaction: each acceptance as it would be alone, in order", arguments: Backend.available)
    func batch(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let a = try await harness.registeredDevice()
        let b = try await harness.registeredDevice()
        let challenge = try await harness.service.issueChallenge(
            purpose: AppAttestService.Purpose.assertion, keyID: b.keyID
        ).challenge
        let use = AssertionAcceptance.ChallengeUse(
            challenge: challenge, purpose: AppAttestService.Purpose.assertion, userID: nil, now: harness.clock.now)
        let unknown = try KeyID(rawValue: [UInt8](repeating: 7, count: 32))
        let outcomes = try await harness.store.acceptAssertions([
            .init(keyID: a.keyID, counter: 3, counterPolicy: .strictlyIncreasing, challenge: nil),
            // the same again: refused
            .init(keyID: a.keyID, counter: 3, counterPolicy: .strictlyIncreasing, challenge: nil),
            .init(keyID: b.keyID, counter: 1, counterPolicy: .strictlyIncreasing, challenge: use),
            // the challenge is spent
            .init(keyID: b.keyID, counter: 2, counterPolicy: .strictlyIncreasing, challenge: use),
            // below 3, inside a window
            .init(keyID: a.keyID, counter: 2, counterPolicy: .reorderWindow(8), challenge: nil),
            .init(keyID: unknown, counter: 1, counterPolicy: .strictlyIncreasing, challenge: nil),
        ])
        #expect(
            outcomes == [
                .accepted(highestCounter: 3), .counterRefused(highestCounter: 3), .accepted(highestCounter: 1),
                .challengeRefused(nil), .accepted(highestCounter: 3), .unknownKey,
            ])
        #expect(try await harness.store.key(a.keyID)?.key.counter == 3)
        #expect(try await harness.store.key(b.keyID)?.key.counter == 1)
        #expect(try await harness.store.challenge(challenge) == nil)
    }

    @Test(
        "a batch without challenges: one statement per round of distinct keys, each acceptance as it would be alone",
        arguments: Backend.available)
    func counterBatch(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let a = try await harness.registeredDevice()
        let b = try await harness.registeredDevice()
        let revoked = try await harness.registeredDevice()
        #expect(try await harness.store.revokeKey(revoked.keyID, at: harness.clock.now))
        let unknown = try KeyID(rawValue: [UInt8](repeating: 7, count: 32))
        let outcomes = try await harness.store.acceptAssertions([
            .init(keyID: a.keyID, counter: 3, counterPolicy: .strictlyIncreasing, challenge: nil),
            // the same again: refused
            .init(keyID: a.keyID, counter: 3, counterPolicy: .strictlyIncreasing, challenge: nil),
            .init(keyID: b.keyID, counter: 5, counterPolicy: .reorderWindow(8), challenge: nil),
            // below 3, inside a window
            .init(keyID: a.keyID, counter: 2, counterPolicy: .reorderWindow(8), challenge: nil),
            .init(keyID: b.keyID, counter: 4, counterPolicy: .reorderWindow(8), challenge: nil),
            .init(keyID: b.keyID, counter: 9, counterPolicy: .reorderWindow(8), challenge: nil),
            .init(keyID: unknown, counter: 1, counterPolicy: .strictlyIncreasing, challenge: nil),
            .init(keyID: revoked.keyID, counter: 1, counterPolicy: .strictlyIncreasing, challenge: nil),
            // below 3, strict
            .init(keyID: a.keyID, counter: 1, counterPolicy: .strictlyIncreasing, challenge: nil),
            // accepted once only
            .init(keyID: b.keyID, counter: 4, counterPolicy: .reorderWindow(8), challenge: nil),
        ])
        // A refusal's highest counter is the key's when the refusal is explained: here the last word on each key.
        #expect(
            outcomes == [
                .accepted(highestCounter: 3), .counterRefused(highestCounter: 3), .accepted(highestCounter: 5),
                .accepted(highestCounter: 3), .accepted(highestCounter: 5), .accepted(highestCounter: 9),
                .unknownKey, .keyRevoked, .counterRefused(highestCounter: 3), .counterRefused(highestCounter: 9),
            ])
        #expect(try await harness.store.key(a.keyID)?.key.counter == 3)
        #expect(try await harness.store.key(b.keyID)?.key.counter == 9)
        #expect(try await harness.store.key(revoked.keyID)?.key.counter == 0)
        // Distinct keys: one round (on PostgreSQL one statement outside any explicit transaction).
        let second = try await harness.store.acceptAssertions([
            .init(keyID: b.keyID, counter: 10, counterPolicy: .strictlyIncreasing, challenge: nil),
            .init(keyID: a.keyID, counter: 3, counterPolicy: .strictlyIncreasing, challenge: nil),
            .init(keyID: revoked.keyID, counter: 2, counterPolicy: .strictlyIncreasing, challenge: nil),
        ])
        #expect(second == [.accepted(highestCounter: 10), .counterRefused(highestCounter: 3), .keyRevoked])
    }

    /// SQLite refuses a statement with more parameters than its limit (250,000 in Debian's build, 32,766 by default),
    /// and a counter statement takes three per key: a batch handed to `acceptAssertions` directly may be larger than
    /// any group-commit batch. PostgreSQL passes arrays, so its limit is not reached; it is left out for the time
    /// 84,000 acceptances take there. One key in 84 is registered (each a real key, whose making is what costs), the
    /// others are not: every acceptance is in the statements all the same, and each gets its own outcome.
    @Test(
        "a batch of 84,000 distinct keys, beyond SQLite's limit on a statement's parameters, is processed whole",
        arguments: Backend.available.filter { $0 != .postgres })
    func largeCounterBatch(_ backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let appID = try AppID("ABCDE12345.com.example.app")
        var keys: [KeyID] = []
        for index in 0..<84_000 {
            if index % 84 == 0 || index == 83_999 {
                let record = TestKeys.record(
                    index == 83_999 ? 1_000 : index / 84, appID: appID, receipt: [1], createdAt: harness.clock.now)
                _ = try await harness.store.insertKey(record)
                keys.append(record.keyID)
            } else {
                // A keyId that no key has: the index in the last bytes.
                var raw = [UInt8](repeating: 0xA5, count: 32)
                withUnsafeBytes(of: UInt64(index).bigEndian) { raw.replaceSubrange(24..<32, with: $0) }
                keys.append(try KeyID(rawValue: raw))
            }
            // The other tests share Swift's few cooperative threads with this loop.
            if index % 1_000 == 0 { await Task.yield() }
        }
        let outcomes = try await harness.store.acceptAssertions(
            keys.map { .init(keyID: $0, counter: 1, counterPolicy: .strictlyIncreasing, challenge: nil) })
        #expect(outcomes.count == keys.count)
        for (index, outcome) in outcomes.enumerated() {
            let registered = index % 84 == 0 || index == 83_999
            guard outcome == (registered ? .accepted(highestCounter: 1) : .unknownKey) else {
                Issue.record("acceptance \(index): \(outcome)")
                break
            }
        }
        #expect(try await harness.store.key(keys[0])?.key.counter == 1)
        #expect(try await harness.store.key(keys[83_999])?.key.counter == 1)
    }

    @Test(
        "a window below 1 is the strict rule and one above 64 is 64, in the rule and in every store",
        arguments: Backend.available)
    func windowOutOfRange(_ backend: Backend) async throws {
        #expect(AppAttestVerifier.CounterPolicy.reorderWindow(0).advance(highest: 5, seen: 0, counter: 3) == nil)
        #expect(AppAttestVerifier.CounterPolicy.reorderWindow(-7).advance(highest: 5, seen: 0, counter: 3) == nil)
        #expect(AppAttestVerifier.CounterPolicy.reorderWindow(1000).advance(highest: 100, seen: 0, counter: 30) == nil)
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        func accept(_ counter: UInt32, window: Int) async throws -> AssertionAcceptanceOutcome {
            try await harness.store.acceptAssertion(
                .init(keyID: device.keyID, counter: counter, counterPolicy: .reorderWindow(window), challenge: nil))
        }
        #expect(try await accept(5, window: 0) == .accepted(highestCounter: 5))
        #expect(try await accept(3, window: 0) == .counterRefused(highestCounter: 5))
        #expect(try await accept(3, window: -7) == .counterRefused(highestCounter: 5))
        #expect(try await accept(100, window: 1000) == .accepted(highestCounter: 100))
        #expect(try await accept(37, window: 1000) == .accepted(highestCounter: 100))
        #expect(try await accept(36, window: 1000) == .counterRefused(highestCounter: 100))
    }
}
