import App
import AppAttest
import AppAttestLifecycle
import AppAttestStore
import Vapor

// APP_ID=TEAMID.bundle.id swift run VaporApp. A build run from Xcode attests in the development environment, so
// this example accepts both; a production server accepts `.production` only.
let appID = try AppID(Environment.get("APP_ID") ?? "ABCDE12345.com.example.app")
let verifier = try AppAttestVerifier(configuration: .init(apps: [appID: [.production, .development]]))
// In memory for the example; SQLiteAppAttestStore (trait SQLite) keeps keys and counters across restarts.
let service = AppAttestService(verifier: verifier, store: MemoryAppAttestStore())
let app = try await Application.make(.detect())
try OrdersApp.configure(app, service: service)
try await app.execute()
try await app.asyncShutdown()
