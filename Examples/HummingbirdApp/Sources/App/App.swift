import AppAttest
import AppAttestHummingbird
import AppAttestStore
import Hummingbird

/// The example's routes: registration under `/appattest` and one protected route, `POST /api/orders`.
public enum OrdersApp {
    /// The router, on `service` (build one per process and share it).
    public static func router(service: AppAttestService) -> Router<AppAttestBasicRequestContext> {
        let router = Router(context: AppAttestBasicRequestContext.self)
        // POST /appattest/challenge and POST /appattest/attestation, for the app's registration.
        AppAttestRoutes<AppAttestBasicRequestContext>(service: service).add(to: router)
        // Every route in this group needs a valid assertion; the handler gets the verified device.
        router.group("api").add(middleware: AppAttestMiddleware(service: service))
            .post("orders") { _, context -> String in
                guard let device = context.attestedDevice else { throw HTTPError(.unauthorized) }
                return "order accepted from key \(device.keyID) (counter \(device.counter))"
            }
        return router
    }
}
