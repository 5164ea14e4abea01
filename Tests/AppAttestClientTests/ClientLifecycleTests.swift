import AppAttest
import AppAttestHTTP
import AppAttestTesting
import AppAttestWire
import Foundation
import Synchronization
import Testing

@testable import AppAttestClient

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Turns, keys and stored state across refusals, resets and damaged storage.
extension ClientTests {
    static func answer(_ status: Int) -> HTTPURLResponse {
        HTTPURLResponse(url: base, statusCode: status, httpVersion: "HTTP/1.1", headerFields: [:])!
    }

    @Test("a POST told to come back later than the client waits may have run: requestMayHaveRun, with the wait")
    func postDeferred() async throws {
        let transport = ScriptedTransport()
        transport.state.withLock { $0.protected = [.problem(.rateLimited(retryAfter: 120))] }
        let client = client(Self.provider(), transport)
        var post = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        post.httpMethod = "POST"
        post.httpBody = Data("{}".utf8)
        do {
            _ = try await client.data(for: post)
            Issue.record("no error")
        } catch {
            #expect(error.code == .requestMayHaveRun && error.problemCode == "rateLimited", "\(error)")
            #expect(error.retryAfter.map { $0.timeIntervalSinceNow > 100 } == true)
        }
        #expect(transport.protectedSent() == 1)
    }

    @Test("a turn is freed once: abandoning a completed request leaves the client serialized")
    func turnFreedOnce() async throws {
        let transport = ScriptedTransport()
        let client = client(Self.provider(), transport)
        let request = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        let permits = await client.permits
        let signed = try await client.sign(request)
        #expect(await client.permits == permits - 1)
        _ = try await client.complete(signed, response: Self.answer(200), body: Data())
        await client.abandon(signed)
        await client.abandon(signed)
        #expect(await client.permits == permits)
    }

    @Test("a request waiting for its turn when the key is reset is signed with the new key, not the old one")
    func resetWhileWaiting() async throws {
        let transport = ScriptedTransport()
        let client = client(Self.provider(), transport)
        let request = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        // The only turn (a serialized client) is held; the next request has its key and waits for the turn.
        let held = try await client.sign(request)
        let waiting = Task { try await client.data(for: request) }
        while await client.waiters.isEmpty { try await Task.sleep(for: .milliseconds(1)) }
        try await client.resetKey()
        _ = try await client.complete(held, response: Self.answer(200), body: Data())
        #expect(try await waiting.value.1.statusCode == 200)
        let keyIDs = transport.sent.filter { $0.url!.path == "/api/x" }.map {
            $0.value(forHTTPHeaderField: RequestBindingHeaders.keyID)
        }
        #expect(keyIDs.count == 1 && keyIDs[0] != held.request.value(forHTTPHeaderField: RequestBindingHeaders.keyID))
    }

    @Test("a stored record this version cannot read is replaced by a new key, not a storage error on every call")
    func unreadableRecord() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("key-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data(#"{"keyID":7,"format":"from a later version"}"#.utf8).write(to: file)
        let transport = ScriptedTransport()
        let provider = Self.provider()
        let client = client(provider, transport, storage: FileKeyStorage(url: file))
        #expect(
            try await client.data(for: URLRequest(url: Self.base.appendingPathComponent("api/x"))).1.statusCode == 200)
        #expect(try FileKeyStorage(url: file).load()?.registered == true)
    }

    @Test("an attestation refused for the request (a rotated service token) keeps the attested key, and posts it again")
    func attestationRefusedForTheRequest() async throws {
        let provider = Self.provider()
        let transport = ScriptedTransport()
        transport.state.withLock {
            $0.attestationRefusals = [AppAttestProblem(status: .unauthorized, code: "unauthorized", title: "scripted")]
        }
        let client = client(provider, transport)
        let request = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        do {
            _ = try await client.data(for: request)
            Issue.record("no error")
        } catch {
            #expect(error.code == .registrationRefused && error.problemCode == "unauthorized", "\(error)")
        }
        // The same attestation, posted with the next request.
        #expect(try await client.data(for: request).1.statusCode == 200)
        #expect(await provider.callCount("generateKey") == 1)
        #expect(await provider.callCount("attestKey") == 1)
        #expect(transport.sent.filter { $0.url!.path == "/appattest/attestation" }.count == 2)
    }

    @Test("Retry-After: 0 is waited as the backoff's first step, not sent again at once")
    func retryAfterZeroWaits() async throws {
        let transport = ScriptedTransport()
        transport.state.withLock { $0.protected = [.problem(.rateLimited(retryAfter: 0))] }
        var configuration = AppAttestClientConfiguration(baseURL: Self.base)
        configuration.initialRetryDelay = 0.3
        configuration.maximumRetryDelay = 10
        let client = AppAttestClient(
            configuration: configuration, keyProvider: Self.provider(), keyStorage: MemoryKeyStorage(),
            transport: transport)
        let request = URLRequest(url: Self.base.appendingPathComponent("api/x"))
        _ = try await client.register()
        let start = ContinuousClock.now
        #expect(try await client.data(for: request).1.statusCode == 200)
        // A lower bound only: a slow machine waits longer, never shorter.
        #expect(ContinuousClock.now - start >= .milliseconds(300))
        #expect(transport.protectedSent() == 2)
    }
}
