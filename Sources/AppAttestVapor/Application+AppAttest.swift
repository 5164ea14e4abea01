#if Vapor
public import AppAttest
public import AppAttestHTTP
import AppAttestStore
public import AppAttestLifecycle
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
public import Vapor

extension Application {
    /// App Attest for this application: the service, its middleware and routes, and the store closed at shutdown.
    public var appAttest: AppAttestApplication { AppAttestApplication(application: self) }
}

/// `app.appAttest`: where the application keeps its ``AppAttestStore/AppAttestService``.
///
/// ```swift
/// app.appAttest.use(service)                       // the store is closed when the application shuts down
/// try app.register(collection: app.appAttest.routes())
/// let protected = app.grouped(app.appAttest.middleware())
/// ```
public struct AppAttestApplication: Sendable {
    /// The application.
    public let application: Application

    struct Key: StorageKey, LockKey {
        typealias Value = AppAttestService
    }

    /// The service `use(_:)` installed; nil before.
    public var serviceIfConfigured: AppAttestService? { application.storage[Key.self] }

    /// The service `use(_:)` installed.
    /// - Precondition: `use(_:)` was called (a configuration error, found at start-up).
    public var service: AppAttestService {
        guard let service = serviceIfConfigured else {
            fatalError("App Attest is not configured: call app.appAttest.use(service) in configure(_:)")
        }
        return service
    }

    /// Installs the service and runs its background work (``AppAttestBackgroundLifecycle``: the group commit of
    /// assertion acceptances, and the purge of expired challenges every `purgeInterval`) from boot to shutdown; at
    /// shutdown the last acceptances are committed, then the store is closed.
    /// - Parameters:
    ///   - service: the service.
    ///   - purgeInterval: how often expired challenges are deleted (nil: never).
    ///   - rendersProblems: also install ``AppAttestProblemMiddleware``, which renders refusals as problem documents
    ///     (pass false when your own error middleware renders ``AppAttestAbort``).
    public func use(_ service: AppAttestService, purgeInterval: Duration? = .seconds(60), rendersProblems: Bool = true)
    {
        application.storage[Key.self] = service
        if rendersProblems { application.middleware.use(AppAttestProblemMiddleware()) }
        // Handlers shut down in reverse order: the background work ends before the store is closed.
        application.lifecycle.use(StoreCloser(store: service.store))
        application.lifecycle.use(AppAttestBackgroundLifecycle(service: service, challengePurgeInterval: purgeInterval))
    }

    /// The middleware that protects routes, on the installed service.
    public func middleware(
        maximumBodySize: Int = AppAttestHTTPLimits.defaultMaximumProtectedBodySize,
        rateLimiter: AppAttestRateLimiter? = nil, refusals: AppAttestMiddleware.Refusals = .thrown,
        freshness: AppAttestFreshness = .challengePerRequest, appIDs: Set<AppID>? = nil
    ) -> AppAttestMiddleware {
        AppAttestMiddleware(
            service: service, maximumBodySize: maximumBodySize, rateLimiter: rateLimiter, refusals: refusals,
            freshness: freshness, appIDs: appIDs)
    }

    /// The challenge and attestation routes, on the installed service; `caller` names who a request counts against
    /// (by default its client's address, `AppAttestRouteCollection.defaultCaller(_:)`; behind a proxy, the address it
    /// forwards).
    public func routes(
        path: String = "appattest", userID: @escaping @Sendable (Request) -> String? = { _ in nil },
        caller: @escaping @Sendable (Request) -> String = { AppAttestRouteCollection.defaultCaller($0) }
    ) -> AppAttestRouteCollection {
        AppAttestRouteCollection(service: service, path: path, userID: userID, caller: caller)
    }

    /// Closes the store at shutdown.
    struct StoreCloser: LifecycleHandler {
        let store: any AppAttestStore
        func shutdownAsync(_ application: Application) async { await store.close() }
    }
}
#endif  // Vapor
