import App
import AppAttest
import AppAttestHummingbird
import AppAttestLifecycle
import AppAttestStore
import Hummingbird

// APP_ID=TEAMID.bundle.id swift run HummingbirdApp. A build run from Xcode attests in the development environment,
// so this example accepts both; a production server accepts `.production` only.
let appID = try AppID(Environment().get("APP_ID") ?? "ABCDE12345.com.example.app")
let verifier = try AppAttestVerifier(configuration: .init(apps: [appID: [.production, .development]]))
// In memory for the example; SQLiteAppAttestStore (trait SQLite) keeps keys and counters across restarts.
let service = AppAttestService(verifier: verifier, store: MemoryAppAttestStore())
// The service's background work (group commit of acceptances, purge of expired challenges) runs beside the server.
let app = Application(
    router: OrdersApp.router(service: service), configuration: .init(address: .hostname("127.0.0.1", port: 8080)),
    services: [AppAttestBackgroundService(service: service)])
try await app.runService()
