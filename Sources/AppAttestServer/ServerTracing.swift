#if Service
public import Foundation
import Logging
import OTel
public import ServiceLifecycle
import Synchronization

/// Traces of `appattest serve`, exported over OTLP/HTTP with swift-otel when an endpoint is configured
/// (`otlpEndpoint`, or OpenTelemetry's own `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; the
/// other `OTEL_*` variables apply too). Metrics stay on `/metrics`, logs on standard error.
public enum ServerTracing {
    /// Bootstraps the process's tracer when an endpoint is configured: call it once, before
    /// ``AppAttestServer/open(configuration:metrics:logger:now:)`` (the service takes the tracer bootstrapped when it
    /// is created), and run the returned service with the server (``AppAttestServer/run(beside:)``), which exports
    /// the spans in the background and flushes them at shutdown.
    /// - Returns: nil when no endpoint is configured (nothing is traced).
    public static func bootstrap(
        _ configuration: ServerConfiguration, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(ServerConfigurationError) -> (any Service)? {
        let fromEnvironment =
            environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != nil
            || environment["OTEL_EXPORTER_OTLP_ENDPOINT"] != nil
        guard configuration.otlpEndpoint != nil || fromEnvironment else { return nil }
        var otel = OTel.Configuration.default
        otel.serviceName = "appattest"
        otel.logs.enabled = false
        otel.metrics.enabled = false
        otel.traces.enabled = true
        otel.traces.exporter = .otlp
        otel.traces.otlpExporter.protocol = .httpProtobuf
        if let endpoint = configuration.otlpEndpoint { otel.traces.otlpExporter.endpoint = endpoint }
        var environment = environment
        let sampler = headSampler(&environment)
        if sampler != nil { otel.traces.sampler = .parentBasedAlwaysOn }
        do {
            let service = try OTel.bootstrap(configuration: otel, environment: environment)
            rootSampler.withLock { $0 = sampler }
            return service
        } catch {
            throw ServerConfigurationError("otlpEndpoint: \(error)")
        }
    }

    /// The sampler of traces' roots that serve's routes apply before any span exists, when the process samples
    /// `parentbased_traceidratio` below 1 (nil otherwise: the tracer's own sampler decides alone).
    static let rootSampler = Mutex<RootSampler?>(nil)

    /// With `OTEL_TRACES_SAMPLER=parentbased_traceidratio` and a ratio below 1 in `OTEL_TRACES_SAMPLER_ARG`, a sampler
    /// of that ratio for the roots, and the two variables removed from `environment`, so that the tracer keeps every
    /// root the head sampler passes and still follows a caller's `traceparent` (`parentbased_always_on`): the same
    /// decisions, without a trace ID drawn for each request sampled out. Any other sampler is left to the tracer.
    package static func headSampler(_ environment: inout [String: String]) -> RootSampler? {
        guard environment["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio",
            let argument = environment["OTEL_TRACES_SAMPLER_ARG"], let ratio = Double(argument),
            ratio >= 0, ratio < 1
        else { return nil }
        environment["OTEL_TRACES_SAMPLER"] = nil
        environment["OTEL_TRACES_SAMPLER_ARG"] = nil
        return RootSampler(ratio: ratio)
    }
}
#endif  // Service
