#if Service
import AppAttest
import Crypto
import Foundation
import Synchronization
import Metrics
public import Prometheus

/// The store's readiness for `/health/ready`, which has no caller to rate-limit (load balancers probe it without a
/// token): the probes that arrive together share one check of the store, and its answer serves those of the next
/// ``freshness``. However many probes arrive, the store is asked about once a second, rather than once a probe,
/// which a flood of probes would turn into store connections taken from the verifications.
final class ReadinessProbe: Sendable {
    /// How long a check's answer serves later probes.
    static let freshness = Duration.seconds(1)

    private struct State {
        var last: (time: ContinuousClock.Instant, ready: Bool)?
        var running: Task<Bool, Never>?
    }
    private let state = Mutex(State())

    /// The last answer while it is fresh, else the answer of the check in progress, else of a new one.
    func isReady(_ check: @escaping @Sendable () async -> Bool) async -> Bool {
        enum Step {
            case answer(Bool), wait(Task<Bool, Never>)
        }
        let step = state.withLock { state -> Step in
            if let last = state.last, ContinuousClock.now - last.time < Self.freshness { return .answer(last.ready) }
            if let running = state.running { return .wait(running) }
            // A task of its own: a probe that goes away does not cancel the others' check.
            let running = Task { await check() }
            state.running = running
            return .wait(running)
        }
        switch step {
        case .answer(let ready): return ready
        case .wait(let running):
            let ready = await running.value
            state.withLock { state in
                if state.running == running {
                    state.running = nil
                    state.last = (ContinuousClock.now, ready)
                }
            }
            return ready
        }
    }
}

/// A caller: the name of its token, what it may do, and which App IDs' keys it may see (nil: all).
struct Caller: Sendable {
    let name: String
    let permissions: Set<ServerConfiguration.Permission>
    let appIDs: Set<AppID>?

    /// Whether the caller may see and act on keys of `appID`.
    func covers(_ appID: AppID) -> Bool { appIDs?.contains(appID) ?? true }
}

/// The callers' bearer tokens, kept as SHA-256 digests and compared in constant time: every configured token is
/// compared on every request, so the time taken says nothing about which one (or how much of one) matched.
struct BearerTokens: Sendable {
    private let entries: [(caller: Caller, digest: SHA256.Digest)]

    init(_ tokens: [ServerConfiguration.Token]) {
        entries = tokens.map { token in
            let permissions = Set(token.permissions ?? ServerConfiguration.Permission.allCases)
            let appIDs = token.appIds.map { Set($0.compactMap { try? AppID($0) }) }
            return (
                Caller(name: token.name, permissions: permissions, appIDs: appIDs),
                SHA256.hash(data: Array(token.token.utf8))
            )
        }
    }

    var isEmpty: Bool { entries.isEmpty }
    var names: [String] { entries.map(\.caller.name) }

    /// The caller whose token is in `authorization` (`Bearer …`), or nil.
    func caller(authorization: String?) -> Caller? {
        guard let authorization, authorization.utf8.count <= 1024 else { return nil }
        let prefix = "bearer "
        guard authorization.lowercased().hasPrefix(prefix) else { return nil }
        let presented = SHA256.hash(data: Array(authorization.utf8.dropFirst(prefix.utf8.count)))
        var found: Caller?
        // swift-crypto compares digests in constant time.
        for entry in entries where entry.digest == presented && found == nil {
            found = entry.caller
        }
        return found
    }
}

/// The service's Prometheus metrics.
public final class ServerMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    static let buckets: [Duration] = [
        .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
        .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .seconds(2.5),
    ]

    static var verifications: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "appattest", metricName: "verifications", unitName: "total",
            helpText: "Operations by outcome: result accepted or refused, code ok or the problem code")
    }
    static var durations: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "appattest", metricName: "operation_duration", unitName: "seconds",
            helpText: "Time to answer an operation, store included")
    }
    static var refusals: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "appattest", metricName: "http_refusals", unitName: "total",
            helpText: "Requests refused before any operation: unauthorized, rateLimited, bodyTooLarge")
    }

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
    }

    /// One operation's outcome: `appattest_verifications_total{operation, result, code}` and
    /// `appattest_operation_duration_seconds{operation, result}`.
    func record(operation: String, code: String?, duration: Duration) {
        let key = "\(operation) \(code ?? "ok")"
        // The registry's lookups by name and labels cost more than the increment: each pair is looked up once.
        let instruments =
            cache.withLock { $0[key] }
            ?? {
                let result = code == nil ? "accepted" : "refused"
                let made = Instruments(
                    counter: registry.makeCounter(
                        descriptor: Self.verifications,
                        labels: [("operation", operation), ("result", result), ("code", code ?? "ok")]),
                    histogram: registry.makeDurationHistogram(
                        descriptor: Self.durations, labels: [("operation", operation), ("result", result)],
                        buckets: Self.buckets))
                // Codes are a closed set of ours, but bound the cache anyway.
                cache.withLock { if $0.count < 1024 { $0[key] = made } }
                return made
            }()
        instruments.counter.increment()
        instruments.histogram.record(duration)
    }

    private struct Instruments: @unchecked Sendable {
        let counter: Prometheus.Counter
        let histogram: Prometheus.DurationHistogram
    }
    private let cache = Mutex<[String: Instruments]>([:])

    /// A request refused before any operation (authentication, size, rate): `appattest_http_refusals_total`.
    func refused(_ code: String) {
        registry.makeCounter(descriptor: Self.refusals, labels: [("code", code)]).increment()
    }

    /// Makes this registry the process's swift-metrics backend, so that the HTTP metrics of Hummingbird's
    /// `MetricsMiddleware` (and any library using swift-metrics) appear in `/metrics`. Once per process.
    public func bootstrapMetricsSystem() {
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
    }

    /// The Prometheus text exposition.
    func exposition() -> [UInt8] {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return buffer
    }
}
#endif  // Service
