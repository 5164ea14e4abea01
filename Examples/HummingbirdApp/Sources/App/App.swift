import AppAttest
import AppAttestHummingbird
import AppAttestLifecycle
import AppAttestStore
import Hummingbird

/// The example's routes: registration under `/appattest` and one protected route, `POST /api/orders`.
public enum OrdersApp {
    /// The router, on `service` (build one per process and share it).
    public static func router(service: AppAttestService) -> Router<AppAttestRequestContext> {
        let router = Router(context: AppAttestRequestContext.self)
        // POST /appattest/challenge and POST /appattest/attestation, for the app's registration (rate-limited).
        router.addRoutes(AppAttestRoutes(service: service).collection, atPath: "appattest")
        // Every route in this group needs a valid assertion; the verified device is the request's identity.
        router.group("api").add(middleware: AppAttestMiddleware(service: service))
            .post("orders") { _, context -> String in
                let device = try context.requireIdentity()
                return "order accepted from key \(device.keyID) (counter \(device.counter))"
            }
        return router
    }
}
