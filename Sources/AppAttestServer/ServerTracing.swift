#if Service
public import Foundation
import Logging
import OTel
public import ServiceLifecycle

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
        do { return try OTel.bootstrap(configuration: otel, environment: environment) } catch {
            throw ServerConfigurationError("otlpEndpoint: \(error)")
        }
    }
}
#endif  // Service
