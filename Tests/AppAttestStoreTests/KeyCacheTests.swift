import AppAttest
import AppAttestStore
import AppAttestTesting
import Foundation
import Testing

/// The service keeps keys it has read for a few seconds; the store stays the authority. These tests change the store
/// behind the service's back, as another process or server would.
@Suite("Service key cache: the store decides")
struct KeyCacheTests {
    @Test("a key revoked elsewhere is refused at once, and its counter does not move", arguments: Backend.available)
    func revokedElsewhere(backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let clientData = Array("first".utf8)
        _ = try await harness.service.authenticateAssertion(
            try device.assert(clientData: clientData), clientData: clientData, keyID: device.keyID)
        // Another server revokes it (straight in the store, bypassing this service and its cache).
        #expect(try await harness.store.revokeKey(device.keyID, at: Date()))
        await expectServiceError(.keyRevoked) {
            _ = try await harness.service.authenticateAssertion(
                try device.assert(clientData: clientData), clientData: clientData, keyID: device.keyID)
        }
        #expect(try await harness.store.key(device.keyID)?.counter == 1)
    }

    @Test("a counter stored by another server refuses this server's replay of it", arguments: Backend.available)
    func counterAdvancedElsewhere(backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let other = AppAttestService(verifier: harness.service.verifier, store: harness.store)
        let first = Array("first".utf8)
        // This server reads the key (counter 0) and caches it.
        _ = try await harness.service.authenticateAssertion(
            try device.assert(clientData: first), clientData: first, keyID: device.keyID)
        // The other server accepts counters 2 and 3.
        let second = try device.assert(clientData: first)
        _ = try await other.authenticateAssertion(second, clientData: first, keyID: device.keyID)
        let third = try device.assert(clientData: first)
        _ = try await other.authenticateAssertion(third, clientData: first, keyID: device.keyID)
        // Replayed here, where the cached counter is still 1: the store refuses it.
        await expectServiceError(.counterReplayed) {
            _ = try await harness.service.authenticateAssertion(second, clientData: first, keyID: device.keyID)
        }
        // And then this server knows the stored counter: the next replay is refused before the store is asked.
        await expectServiceError(.verificationFailed) {
            _ = try await harness.service.authenticateAssertion(third, clientData: first, keyID: device.keyID)
        }
        #expect(try await harness.store.key(device.keyID)?.counter == 3)
        let fourth = try device.assert(clientData: first)
        #expect(
            try await harness.service.authenticateAssertion(fourth, clientData: first, keyID: device.keyID).key.counter
                == 4)
    }
}
