#if Service
import HTTPTypes
import Hummingbird
import Tracing

/// Continues the caller's trace: the W3C `traceparent` (and `tracestate`) of a request, when it has one, becomes the
/// parent of the service's verification span, so that a gateway's trace holds the verification's steps and its
/// sampling decision holds for them (“Operating App Attest in production”, “Traces”). No span of its own: a request
/// costs one header lookup, and the service's span is the request's.
struct TraceContextMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        guard request.headers[Self.traceparent] != nil else { return try await next(request, context) }
        var serviceContext = ServiceContext.current ?? .topLevel
        InstrumentationSystem.instrument.extract(request.headers, into: &serviceContext, using: FieldsExtractor())
        return try await ServiceContext.$current.withValue(serviceContext) { try await next(request, context) }
    }

    static var traceparent: HTTPField.Name { HTTPField.Name("traceparent")! }

    struct FieldsExtractor: Extractor {
        func extract(key: String, from carrier: HTTPFields) -> String? {
            HTTPField.Name(key).flatMap { carrier[$0] }
        }
    }
}
#endif  // Service
