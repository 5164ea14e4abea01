import AppAttest
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import InMemoryTracing
import Testing
import Tracing

/// The service's spans: one per attestation and assertion, a child per step, the App ID and the refusal's code.
@Suite("Traces")
struct TracingTests {
    func service(_ tracer: InMemoryTracer) throws -> AppAttestService {
        AppAttestService(
            verifier: try AppAttestVerifier(
                configuration: .init(
                    apps: [Harness.appID: [.production]], trustAnchor: Harness.authority.trustAnchor)),
            store: MemoryAppAttestStore(), tracer: tracer)
    }

    func attributes(_ span: FinishedInMemorySpan) -> [String: String] {
        var result: [String: String] = [:]
        span.attributes.forEach { key, value in
            if case .string(let text) = value.toSpanAttribute() { result[key] = text }
        }
        return result
    }

    /// A simulated device registered on `service`.
    func register(_ service: AppAttestService) async throws -> SimulatedDevice {
        let device = try SimulatedDevice(authority: Harness.authority, appID: Harness.appID)
        let challenge = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation).challenge
        _ = try await service.registerAttestation(
            try device.attest(challenge: challenge), keyID: device.keyID, challenge: challenge)
        return device
    }

    @Test("a registration posted again is verified once: its later reposts are answered without the chain's check")
    func repostVerifiedOnce() async throws {
        let tracer = InMemoryTracer()
        let service = try service(tracer)
        let device = try SimulatedDevice(authority: Harness.authority, appID: Harness.appID)
        let challenge = try await service.issueChallenge(purpose: AppAttestService.Purpose.attestation).challenge
        let object = try device.attest(challenge: challenge)
        let registered = try await service.registerAttestation(object, keyID: device.keyID, challenge: challenge)
        // Chain checks in the spans of each post, in order: the registration's, then the reposts'.
        var chains: [Int] = []
        for _ in 0..<3 {
            let before = tracer.finishedSpans.filter { $0.operationName == "appattest.chain" }.count
            let again = try await service.registerAttestation(object, keyID: device.keyID, challenge: challenge)
            #expect(again.keyID == registered.keyID && again.receipt == registered.receipt)
            chains.append(tracer.finishedSpans.filter { $0.operationName == "appattest.chain" }.count - before)
        }
        #expect(chains == [1, 0, 0], "chain checks per repost: \(chains)")
        // The body with another challenge (a new one each time, so that no digest of it is known), or another
        // user's repost of it, is not the registration's: refused, without a chain check.
        let before = tracer.finishedSpans.filter { $0.operationName == "appattest.chain" }.count
        for _ in 0..<3 {
            let other = (0..<32).map { _ in UInt8.random(in: 0...255) }
            await expectServiceError(.challengeUnknown) {
                _ = try await service.registerAttestation(object, keyID: device.keyID, challenge: other)
            }
        }
        await expectServiceError(.challengeUnknown) {
            _ = try await service.registerAttestation(object, keyID: device.keyID, challenge: challenge, userID: "x")
        }
        #expect(tracer.finishedSpans.filter { $0.operationName == "appattest.chain" }.count == before)
    }

    @Test("an attestation and an assertion: a span each, children for every step, in order and within the parent")
    func spans() async throws {
        let tracer = InMemoryTracer()
        let service = try service(tracer)
        let device = try await register(service)
        _ = try await service.authenticateAssertion(
            try device.assert(clientData: [1]), clientData: [1], keyID: device.keyID)
        let spans = tracer.finishedSpans
        for (operation, steps) in [
            (
                "appattest.attestation",
                [
                    "appattest.challenge", "appattest.decode", "appattest.chain", "appattest.nonce",
                    "appattest.checks", "appattest.store",
                ]
            ),
            (
                "appattest.assertion",
                [
                    "appattest.key", "appattest.decode", "appattest.signature", "appattest.checks",
                    "appattest.acceptance",
                ]
            ),
        ] {
            let parent = try #require(spans.first { $0.operationName == operation })
            #expect(attributes(parent)["appattest.app_id"] == Harness.appID.rawValue)
            #expect(attributes(parent)["appattest.key_id"] == device.keyID.base64EncodedString)
            #expect(attributes(parent)["appattest.refusal_code"] == nil)
            let children = spans.filter { $0.parentSpanID == parent.spanID && $0.traceID == parent.traceID }
                .sorted { $0.startInstant.nanosecondsSinceEpoch < $1.startInstant.nanosecondsSinceEpoch }
            #expect(Set(children.map(\.operationName)) == Set(steps), "\(operation): \(children.map(\.operationName))")
            for child in children {
                #expect(child.startInstant.nanosecondsSinceEpoch >= parent.startInstant.nanosecondsSinceEpoch)
                #expect(child.endInstant.nanosecondsSinceEpoch <= parent.endInstant.nanosecondsSinceEpoch)
            }
        }
    }

    @Test("a refusal: the span carries its code and an error status, and its failed step ends the steps")
    func refusal() async throws {
        let tracer = InMemoryTracer()
        let service = try service(tracer)
        let device = try await register(service)
        var options = SimulatedDevice.AssertionOptions()
        options.corruptSignature = true
        await expectServiceError(.verificationFailed) {
            _ = try await service.authenticateAssertion(
                try device.assert(clientData: [1], options), clientData: [1], keyID: device.keyID)
        }
        let parent = try #require(tracer.finishedSpans.first { $0.operationName == "appattest.assertion" })
        #expect(attributes(parent)["appattest.refusal_code"] == "signatureInvalid")
        #expect(parent.status?.code == .error)
        let children = tracer.finishedSpans.filter { $0.parentSpanID == parent.spanID }.map(\.operationName)
        #expect(Set(children) == ["appattest.key", "appattest.decode", "appattest.signature"])
    }
}
