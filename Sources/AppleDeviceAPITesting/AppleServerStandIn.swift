#if AppleServerAPI && Hummingbird
public import AppAttest
public import AppAttestTesting
public import Crypto
public import Foundation
import HTTPTypes
import Hummingbird
import JWTKit
import Logging
import NIOCore
import Synchronization

/// A local stand-in for Apple's DeviceCheck and App Attest receipt servers, as documented (“Receipts and the risk
/// metric”, “DeviceCheck's two bits”), for
/// tests over real HTTP on 127.0.0.1.
///
/// It verifies provider tokens (ES256 signature with the registered key, `kid`, `iss`, age), keeps two bits per
/// device token, answers with Apple's status codes and bodies, and issues refreshed receipts signed by a
/// ``TestReceiptAuthority``. ``enqueue(status:body:)`` forces the next answers, to produce every status.
public final class AppleServerStandIn: Sendable {
    /// A provider key the server accepts.
    public struct RegisteredKey: Sendable {
        /// The Team ID tokens must name.
        public var teamID: String
        /// The Key ID tokens must name.
        public var keyID: String
        /// The key tokens must be signed with.
        public var publicKey: P256.Signing.PublicKey

        /// A provider key the stand-in accepts.
        public init(teamID: String, keyID: String, publicKey: P256.Signing.PublicKey) {
            self.teamID = teamID
            self.keyID = keyID
            self.publicKey = publicKey
        }
    }

    /// The provider keys it accepts.
    public let keys: [RegisteredKey]
    /// The authority that signs refreshed receipts.
    public let receiptAuthority: TestReceiptAuthority
    /// The environment of the receipt endpoint: receipts of the other one get 400 Incorrect Environment.
    public let receiptEnvironment: AppAttestEnvironment
    /// Whether the receipt endpoint wants `Bearer <token>` rather than the bare token.
    public let receiptEndpointWantsBearer: Bool
    let now: @Sendable () -> Date
    let state = StandInState()
    private let running = RunningServer()

    /// A stand-in accepting `keys`, signing receipts with `receiptAuthority`.
    public init(
        keys: [RegisteredKey], receiptAuthority: TestReceiptAuthority,
        receiptEnvironment: AppAttestEnvironment = .production,
        receiptEndpointWantsBearer: Bool = false, now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.keys = keys
        self.receiptAuthority = receiptAuthority
        self.receiptEnvironment = receiptEnvironment
        self.receiptEndpointWantsBearer = receiptEndpointWantsBearer
        self.now = now
    }

    // MARK: Control

    /// Forces the next answer (of any endpoint) to be this status and body, before any other check.
    public func enqueue(status: Int, body: String, headers: [String: String] = [:]) async {
        await state.enqueue(.init(status: status, body: body, headers: headers))
    }

    /// Makes the receipt endpoint answer 404 for this attested key (Apple's data expired).
    public func expireData(forKeyPoint point: [UInt8]) async { await state.expire(point) }

    /// The risk metric written into refreshed receipts for this key (1 by default).
    public func setRiskMetric(_ metric: Int, forKeyPoint point: [UInt8]) async {
        await state.setMetric(metric, for: point)
    }

    /// Device tokens the server rejects as malformed (400 Bad Device Token).
    public func rejectDeviceToken(_ token: String) async { await state.reject(token) }

    /// The bits stored for a device token.
    public func bits(for token: String) async -> (bit0: Bool, bit1: Bool)? { await state.bits(for: token) }

    /// How many requests the server has answered.
    public var requestCount: Int { get async { await state.requests } }

    // MARK: Running

    /// Starts listening on 127.0.0.1 (an ephemeral port) and returns the base URL, e.g. `http://127.0.0.1:54321`.
    public func start() async throws -> String {
        let router = Router()
        for path in ["/v1/query_two_bits", "/v1/update_two_bits", "/v1/validate_device_token"] {
            router.post(RouterPath(path)) { request, _ in try await self.deviceCheck(request, path: path) }
            router.get(RouterPath(path)) { _, _ in Self.text(405, "Method Not Allowed") }
        }
        router.post("/v1/attestationData") { request, _ in try await self.attestationData(request) }
        router.get("/v1/attestationData") { _, _ in Self.text(405, "Method Not Allowed") }
        let (portStream, portContinuation) = AsyncStream<Int>.makeStream()
        var logger = Logger(label: "AppleServerStandIn")
        logger.logLevel = .critical  // stopping by cancellation logs a harmless "already closed"
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0), serverName: "stand-in"),
            onServerRunning: { channel in
                portContinuation.yield(channel.localAddress?.port ?? 0)
                portContinuation.finish()
            }, logger: logger)
        let task = Task { try await app.runService() }
        running.set(task)
        var iterator = portStream.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            throw StandInError(description: "the stand-in server did not start")
        }
        return "http://127.0.0.1:\(port)"
    }

    /// Stops the server.
    public func stop() async {
        guard let task = running.take() else { return }
        task.cancel()
        _ = try? await task.value
    }

    // MARK: DeviceCheck

    private func deviceCheck(_ request: Request, path: String) async throws -> Response {
        await state.count()
        if let forced = await state.dequeue() { return Self.text(forced.status, forced.body, headers: forced.headers) }
        guard let authorization = request.headers[.authorization], authorization.hasPrefix("Bearer ") else {
            return Self.text(400, "Missing or badly formatted authorization token")
        }
        if let failure = await verify(token: String(authorization.dropFirst(7))) { return failure }
        let body = try await request.body.collect(upTo: 64 * 1024)
        guard let fields = try? JSONDecoder().decode(DeviceCheckBody.self, from: Data(buffer: body)) else {
            return Self.text(400, "Missing or incorrectly formatted payload")
        }
        guard let token = fields.deviceToken, !token.isEmpty, Data(base64Encoded: token) != nil,
            await !state.isRejected(token)
        else { return Self.text(400, "Missing or incorrectly formatted device token payload") }
        guard let transaction = fields.transactionID, !transaction.isEmpty else {
            return Self.text(400, "Missing or incorrectly formatted payload")
        }
        guard let timestamp = fields.timestamp, abs(Double(timestamp) / 1000 - now().timeIntervalSince1970) < 3600
        else {
            return Self.text(400, "Missing or incorrectly formatted time stamp")
        }
        switch path {
        case "/v1/query_two_bits":
            guard let stored = await state.stored(for: token) else { return Self.text(200, "Failed to find bit state") }
            let json = "{\"bit0\":\(stored.bit0),\"bit1\":\(stored.bit1),\"last_update_time\":\"\(stored.month)\"}"
            return Self.text(200, json, headers: ["Content-Type": "application/json"])
        case "/v1/update_two_bits":
            guard fields.bit0 != .absent || fields.bit1 != .absent, fields.bit0 != .invalid, fields.bit1 != .invalid
            else {
                return Self.text(400, "Missing or incorrectly formatted bits")
            }
            let formatter = DateFormatter()
            formatter.dateFormat = "yyyy-MM"
            formatter.timeZone = TimeZone(identifier: "UTC")
            await state.update(
                token, bit0: fields.bit0.value, bit1: fields.bit1.value, month: formatter.string(from: now()))
            return Self.text(200, "")
        default:
            return Self.text(200, "")
        }
    }

    // MARK: Receipts

    private func attestationData(_ request: Request) async throws -> Response {
        await state.count()
        if let forced = await state.dequeue() { return Self.text(forced.status, forced.body, headers: forced.headers) }
        guard var authorization = request.headers[.authorization] else { return Self.text(401, "Unauthorized") }
        if receiptEndpointWantsBearer {
            guard authorization.hasPrefix("Bearer ") else { return Self.text(401, "Unauthorized") }
            authorization = String(authorization.dropFirst(7))
        }
        if let failure = await verify(token: authorization) {
            return failure.status == .badRequest ? Self.text(401, "Unauthorized") : failure
        }
        let body = try await request.body.collect(upTo: 64 * 1024)
        let text = String(buffer: body).filter { !$0.isWhitespace }
        guard let bytes = Data(base64Encoded: text), let receipt = try? AppAttestReceipt.inspect(bytes),
            let point = receipt.attestedPublicKey
        else { return Self.text(400, "Bad Payload") }
        guard receipt.environment == receiptEnvironment else { return Self.text(400, "Incorrect Environment") }
        if await state.isExpired(point) { return Self.text(404, "No Data Found") }
        let time = now()
        if let notBefore = receipt.notBefore, notBefore > time { return Self.text(304, "") }
        let fields = TestReceiptAuthority.Fields(
            appID: receipt.appID, attestedCertificate: receipt.attestedCertificate, clientHash: receipt.clientHash,
            token: receipt.token, type: "RECEIPT", environment: receipt.environmentName, creationTime: time,
            riskMetric: nil, notBefore: nil, expirationTime: nil
        ).refreshed(at: time, riskMetric: await state.metric(for: point))
        let refreshed = try receiptAuthority.sign(fields, indefiniteLength: false)
        return Self.text(200, Data(refreshed).base64EncodedString(), headers: ["Content-Type": "base64"])
    }

    // MARK: Provider tokens

    /// nil when the token is good; otherwise Apple's answer.
    private func verify(token: String) async -> Response? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = Self.json(parts[0]), let claims = Self.json(parts[1]) else {
            return Self.text(400, "Missing or badly formatted authorization token")
        }
        guard header["alg"] as? String == "ES256", let kid = header["kid"] as? String,
            let key = keys.first(where: { $0.keyID == kid }), claims["iss"] as? String == key.teamID,
            let iat = claims["iat"] as? NSNumber
        else { return Self.text(401, "Unable to verify authorization token") }
        // iat is whole seconds (“DeviceCheck's two bits”), at most an hour old, never in the future.
        let issued = iat.doubleValue
        guard issued == issued.rounded(), issued <= now().timeIntervalSince1970 + 60 else {
            return Self.text(401, "Unable to verify authorization token")
        }
        guard now().timeIntervalSince1970 - issued <= 3600 else { return Self.text(401, "Authorization Token Expired") }
        do {
            let collection = JWTKeyCollection()
            await collection.add(ecdsa: try ES256PublicKey(backing: key.publicKey), kid: JWKIdentifier(string: kid))
            _ = try await collection.verify(token, as: StandInClaims.self)
            return nil
        } catch {
            return Self.text(401, "Unable to verify authorization token")
        }
    }

    private static func json(_ part: Substring) -> [String: Any]? {
        var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text.append("=") }
        guard let data = Data(base64Encoded: text) else { return nil }
        return try? JSONSerialization.jsonObject(with: data) as? [String: Any]
    }

    static func text(_ status: Int, _ body: String, headers: [String: String] = [:]) -> Response {
        var fields = HTTPFields()
        fields[.contentType] = "text/plain; charset=UTF-8"
        for (name, value) in headers {
            if let field = HTTPField.Name(name) { fields[field] = value }
        }
        return Response(
            status: .init(code: status), headers: fields, body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}

/// A DeviceCheck request body, each field read on its own so that a wrong one gets its own answer.
struct DeviceCheckBody: Decodable {
    enum Flag: Equatable {
        case absent, invalid
        case value(Bool)
        var value: Bool? { if case .value(let bit) = self { bit } else { nil } }
    }

    var deviceToken: String?
    var transactionID: String?
    var timestamp: Int64?
    var bit0: Flag
    var bit1: Flag

    enum CodingKeys: String, CodingKey {
        case deviceToken = "device_token", transactionID = "transaction_id", timestamp, bit0, bit1
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        deviceToken = try? container.decodeIfPresent(String.self, forKey: .deviceToken)
        transactionID = try? container.decodeIfPresent(String.self, forKey: .transactionID)
        timestamp = try? container.decodeIfPresent(Int64.self, forKey: .timestamp)
        func flag(_ key: CodingKeys) -> Flag {
            guard container.contains(key) else { return .absent }
            guard let bit = try? container.decode(Bool.self, forKey: key) else { return .invalid }
            return .value(bit)
        }
        bit0 = flag(.bit0)
        bit1 = flag(.bit1)
    }
}

struct StandInClaims: JWTPayload {
    var iss: String
    var iat: Double
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

struct StandInError: Error, CustomStringConvertible {
    var description: String
}

/// The stand-in's mutable state.
actor StandInState {
    struct Forced: Sendable {
        var status: Int
        var body: String
        var headers: [String: String]
    }

    struct Stored {
        var bit0: Bool
        var bit1: Bool
        var month: String
    }

    private var forced: [Forced] = []
    private var storedBits: [String: Stored] = [:]
    private var expired: Set<[UInt8]> = []
    private var metrics: [[UInt8]: Int] = [:]
    private var rejected: Set<String> = []
    private(set) var requests = 0

    func enqueue(_ response: Forced) { forced.append(response) }
    func dequeue() -> Forced? { forced.isEmpty ? nil : forced.removeFirst() }
    func count() { requests += 1 }
    func stored(for token: String) -> Stored? { storedBits[token] }
    func bits(for token: String) -> (bit0: Bool, bit1: Bool)? { storedBits[token].map { ($0.bit0, $0.bit1) } }
    func update(_ token: String, bit0: Bool?, bit1: Bool?, month: String) {
        let old = storedBits[token]
        storedBits[token] = Stored(bit0: bit0 ?? old?.bit0 ?? false, bit1: bit1 ?? old?.bit1 ?? false, month: month)
    }
    func expire(_ point: [UInt8]) { expired.insert(point) }
    func isExpired(_ point: [UInt8]) -> Bool { expired.contains(point) }
    func setMetric(_ metric: Int, for point: [UInt8]) { metrics[point] = metric }
    func metric(for point: [UInt8]) -> Int { metrics[point] ?? 1 }
    func reject(_ token: String) { rejected.insert(token) }
    func isRejected(_ token: String) -> Bool { rejected.contains(token) }
}

/// The server task, behind a lock.
final class RunningServer: Sendable {
    private let task = Mutex<Task<Void, any Error>?>(nil)
    func set(_ value: Task<Void, any Error>) { task.withLock { $0 = value } }
    func take() -> Task<Void, any Error>? {
        task.withLock { value in
            defer { value = nil }; return value
        }
    }
}
#endif  // AppleServerAPI && Hummingbird
