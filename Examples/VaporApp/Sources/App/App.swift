import AppAttest
import AppAttestStore
import AppAttestVapor
import Vapor

/// The example's routes: registration under `/appattest` and one protected route, `POST /api/orders`.
public enum OrdersApp {
    /// Adds the routes to `app`, on `service` (build one per process and share it).
    public static func configure(_ app: Application, service: AppAttestService) throws {
        // POST /appattest/challenge and POST /appattest/attestation, for the app's registration.
        try app.register(collection: AppAttestRouteCollection(service: service))
        // Every route in this group needs a valid assertion; the handler gets the verified device.
        app.grouped("api").grouped(AppAttestMiddleware(service: service))
            .post("orders") { request async throws -> String in
                let device = try request.auth.require(AttestedDevice.self)
                return "order accepted from key \(device.keyID) (counter \(device.counter))"
            }
    }
}
