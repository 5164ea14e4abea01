#if Service
import AppAttestLifecycle
import HTTPTypes
import Hummingbird
import Synchronization
import Tracing

/// Continues the caller's trace: the W3C `traceparent` (and `tracestate`) of a request, when it has one, becomes the
/// parent of the service's verification span, so that a gateway's trace holds the verification's steps and its
/// sampling decision holds for them (“Operating App Attest in production”, “Traces”). No span of its own: a request
/// costs one header lookup, and the service's span is the request's.
///
/// A request without one is a trace's root. With a head sampler (``ServerTracing``, `parentbased_traceidratio`), the
/// root's sampling decision is drawn here, before any span exists: a request sampled out starts no span at all, where
/// the tracer would draw a trace ID and a span ID from the system's random source only to drop them.
struct TraceContextMiddleware<Context: RequestContext>: RouterMiddleware {
    let sampler: RootSampler?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        var serviceContext = ServiceContext.current ?? .topLevel
        if request.headers[Self.traceparent] != nil {
            InstrumentationSystem.instrument.extract(request.headers, into: &serviceContext, using: FieldsExtractor())
        } else if let sampler, !sampler.sample() {
            serviceContext[SampledOutKey.self] = true
        } else {
            return try await next(request, context)
        }
        return try await ServiceContext.$current.withValue(serviceContext) { try await next(request, context) }
    }

    static var traceparent: HTTPField.Name { HTTPField.Name("traceparent")! }

    struct FieldsExtractor: Extractor {
        func extract(key: String, from carrier: HTTPFields) -> String? {
            HTTPField.Name(key).flatMap { carrier[$0] }
        }
    }
}

/// Samples traces' roots with a probability, as OpenTelemetry's `traceidratio` sampler does for a root's random trace
/// ID, but without drawing one: a counter mixed by SplitMix64's finalizer, seeded once from the system's random
/// source. The decision only chooses which requests are traced; nothing depends on it being unpredictable.
package final class RootSampler: Sendable {
    /// Sampled when the mixed counter is below this; `nil` samples every root.
    private let threshold: UInt64?
    private let state: Atomic<UInt64>

    /// A sampler of `ratio` (0 to 1) of the roots.
    package init(ratio: Double) {
        precondition(ratio >= 0 && ratio <= 1, "a sampling ratio is between 0 and 1")
        threshold = ratio >= 1 ? nil : UInt64(ratio * 0x1p64)
        state = Atomic(UInt64.random(in: .min ... .max))
    }

    /// Whether this root is sampled.
    package func sample() -> Bool {
        guard let threshold else { return true }
        var z = state.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31) < threshold
    }
}
#endif  // Service
