import AppAttest
import AppAttestLifecycle
import AppAttestStore
import AppAttestVapor
import Vapor

/// The example's routes: registration under `/appattest` and one protected route, `POST /api/orders`.
public enum OrdersApp {
    /// Installs `service` (its store is closed when the application shuts down) and adds the routes.
    public static func configure(_ app: Application, service: AppAttestService) throws {
        app.appAttest.use(service)
        // POST /appattest/challenge and POST /appattest/attestation, for the app's registration (rate-limited).
        try app.register(collection: app.appAttest.routes())
        // Every route in this group needs a valid assertion; the handler gets the verified device.
        app.grouped("api").grouped(app.appAttest.middleware())
            .post("orders") { request async throws -> String in
                let device = try request.appAttest.requireDevice()
                return "order accepted from key \(device.keyID) (counter \(device.counter))"
            }
    }
}
