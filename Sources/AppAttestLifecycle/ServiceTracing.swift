import AppAttest
import Foundation
import Tracing

/// One traced operation of the service: a span for the whole, and a child span for each of its steps, with the key's
/// App ID and, on a refusal, its code as attributes (“Operating App Attest in production”, “Traces”).
struct ServiceTrace: Sendable {
    let tracer: any Tracer
    let span: any Span

    /// A trace of `operation`, or nil when the service has no tracer or the tracer's sampler dropped the span
    /// (nothing is recorded, no clock is read and no child span is started: a sampled-out request costs one span
    /// that records nothing).
    init?(_ tracer: (any Tracer)?, _ operation: String) {
        guard let tracer else { return nil }
        let context = ServiceContext.current ?? .topLevel
        if context[SampledOutKey.self] == true { return nil }
        let span = tracer.startSpan(operation, context: context, ofKind: .internal)
        guard span.isRecording else {
            span.end()
            return nil
        }
        self.tracer = tracer
        self.span = span
    }

    /// Child spans for the verifier's steps, from the instants it marked.
    func steps(_ timeline: VerificationTimeline) {
        var start = timeline.start
        for mark in timeline.marks {
            child("appattest.\(mark.step)", from: start, to: mark.end)
            start = mark.end
        }
    }

    /// A child span over `body` (a store operation, a budget).
    func step<T, E: Error>(_ name: String, _ body: () async throws(E) -> T) async throws(E) -> T {
        let start = VerificationTimeline.now()
        defer { child(name, from: start, to: VerificationTimeline.now()) }
        return try await body()
    }

    func child(_ name: String, from start: UInt64, to end: UInt64) {
        let child = tracer.startSpan(
            name, context: span.context, ofKind: .internal, at: TraceInstant(nanosecondsSinceEpoch: start))
        child.end(at: TraceInstant(nanosecondsSinceEpoch: max(start, end)))
    }

    func appID(_ appID: AppID?) {
        guard let appID else { return }
        span.attributes["appattest.app_id"] = appID.rawValue
    }

    func keyID(_ keyID: KeyID) {
        span.attributes["appattest.key_id"] = keyID.base64EncodedString
    }

    /// Ends the span; a refusal's code becomes an attribute and the span's status an error.
    func end(refusal: AppAttestServiceError?) {
        if let refusal {
            let code = refusal.verification.map { $0.code.description } ?? refusal.code.name
            span.attributes["appattest.refusal_code"] = code
            span.setStatus(SpanStatus(code: .error, message: code))
        }
        span.end()
    }
}

/// Marks a request whose trace a front end has already decided not to sample (`appattest serve`'s head sampling): the
/// service starts no span for it, so that the tracer draws no trace and span IDs only to drop them.
package enum SampledOutKey: ServiceContextKey {
    package typealias Value = Bool
}

/// An instant for spans whose times were taken before they were created.
struct TraceInstant: TracerInstant {
    let nanosecondsSinceEpoch: UInt64
    static func < (lhs: TraceInstant, rhs: TraceInstant) -> Bool {
        lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch
    }
}
