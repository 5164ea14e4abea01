#if Service
import AppAttestCommandSupport
import AppAttestServer
import AppAttestStore
import ArgumentParser
import CAppAttestAllocator
import Foundation
import Logging
import UnixSignals

/// `appattest serve`: the verification service (Sources/AppAttestServer, API in openapi.yaml).
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve App Attest verification as a JSON API for other services (SQLite or PostgreSQL).",
        discussion: """
            Configuration: the JSON file (--config, or appattest.json in the working directory when present; see \
            appattest.sample.json), then APPATTEST_* environment variables, then these options. With no token \
            configured, a random bearer token is generated into appattest-token (mode 0600). SIGHUP reloads the \
            tokens from the configuration file; SIGTERM or SIGINT stop the server after in-flight requests \
            finish.
            """
    )

    @Option(help: "JSON configuration file.") var config: String?
    @Option(help: "sqlite:PATH (default sqlite:appattest.sqlite) or postgres://user[:password]@host[:port]/db.")
    var database: String?
    @Option(help: "Address to listen on (default 127.0.0.1).") var host: String?
    @Option(help: "Port (default 8080).") var port: Int?
    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = ProcessInfo.processInfo.environment["APPATTEST_LOG_LEVEL"] ?? "info"
    @Option(name: .customLong("log-format"), help: "text (swift-log's default) or json (one object per line).")
    var logFormat: String = ProcessInfo.processInfo.environment["APPATTEST_LOG_FORMAT"] ?? "text"

    /// glibc's trim threshold for this process (``run()``).
    static let trimThreshold: Int32 = 32 << 20

    func run() async throws {
        // Each SQLite `UPDATE … FROM` (a batch of counters) opens a temporary B-tree whose page cache is one block of
        // about 90 KiB, freed when the statement ends. With glibc's default threshold (128 KiB, at first) that block
        // is often returned to the system at once and faulted in again by the next statement, in some runs and not in
        // others, depending on where the block lands in its heap. Free memory is kept up to 32 MiB per heap instead
        // (README "Load" has what it costs and saves).
        _ = appattest_set_trim_threshold(Self.trimThreshold)
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError("unknown log level \(Terminal.safe(logLevel, limit: 32))")
        }
        switch logFormat {
        case "json": LoggingSystem.bootstrap { label in JSONLogHandler(label: label) }
        case "text": break
        default: throw ValidationError("unknown log format \(Terminal.safe(logFormat, limit: 32))")
        }
        // A SIGHUP before the reloader below traps it (a configuration sidecar signalling a pod that is still
        // migrating its store) is ignored, rather than ending the process as its default action does.
        signal(SIGHUP, SIG_IGN)
        var logger = Logger(label: "appattest.serve")
        logger.logLevel = level
        let configuration = try loadConfiguration(logger: logger)
        let metrics = ServerMetrics()
        metrics.bootstrapMetricsSystem()
        // Before the server: its service takes the tracer bootstrapped when it is created.
        let observability = try ServerTracing.bootstrap(configuration)
        let server = try await AppAttestServer.open(configuration: configuration, metrics: metrics, logger: logger)
        // SIGHUP: read the configuration again, so that tokens rotate and App IDs move between report and enforce
        // without a restart; a bad file changes nothing.
        let reloader = Task {
            for await _ in await UnixSignalsSequence(trapping: .sighup) {
                do { try server.reload(try loadConfiguration(logger: logger)) } catch {
                    logger.error("SIGHUP: configuration not reloaded", metadata: ["error": "\(error)"])
                }
            }
        }
        defer { reloader.cancel() }
        logger.info(
            "listening",
            metadata: [
                "address": "http://\(configuration.host):\(configuration.port)",
                "database": "\((try? configuration.storeLocation())?.logged ?? "")",
                "apps": "\(configuration.apps.map(\.appId).joined(separator: ","))",
                "callers": "\(server.configuration.tokens.map(\.name).joined(separator: ","))",
            ])
        try await server.run(beside: observability)
    }

    /// The file (if any), then the environment, then the options.
    func loadConfiguration(logger: Logger) throws -> ServerConfiguration {
        var configuration = ServerConfiguration()
        let implicit = config == nil && FileManager.default.fileExists(atPath: "appattest.json")
        if let file = config ?? (implicit ? "appattest.json" : nil) {
            configuration = try ServerConfiguration.load(file: file)
            if implicit {
                // Picked up because it was there: say so, so that a file nobody meant to use is noticed.
                logger.warning(
                    "configuration read from appattest.json in the working directory, which --config did not name")
            } else {
                logger.info("configuration read from \(Terminal.safe(file, limit: 256))")
            }
        }
        let fileTokens = configuration.tokens.count
        let environment = ProcessInfo.processInfo.environment
        try configuration.apply(environment: environment)
        if fileTokens > 0, environment["APPATTEST_TOKENS"] != nil {
            // Else an operator who removes a leaked token from the file, and reloads, believes it gone.
            logger.warning(
                "APPATTEST_TOKENS replaces the \(fileTokens) tokens of the configuration file: rotate them there")
        }
        // serve's own options, and what the project's scripts and tests export beside it.
        let unknown = ServerConfiguration.unknownEnvironmentNames(
            in: environment,
            also: [
                "APPATTEST_LOG_FORMAT", "APPATTEST_LOG_LEVEL", "APPATTEST_BINARY", "APPATTEST_DEV_BINARY",
                "APPATTEST_POSTGRES_URL", "APPATTEST_POSTGRES_CA", "APPATTEST_POSTGRES_DATA", "APPATTEST_POSTGRES_PORT",
                "APPATTEST_WINDOW",
            ])
        if !unknown.isEmpty {
            logger.warning(
                "environment variables that no setting reads, ignored: \(unknown.joined(separator: ", "))")
        }
        if let database { configuration.database = database }
        if let host { configuration.host = host }
        if let port { configuration.port = port }
        return configuration
    }
}
#endif  // Service
