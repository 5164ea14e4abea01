#if ClientMiddleware
public import AppAttestClient
public import Foundation
public import HTTPTypes
public import OpenAPIRuntime

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The app client in front of a client that swift-openapi-generator made: every operation's request is signed with
/// the app's key (``AppAttestClient/AppAttestClient/sign(_:isIdempotent:)``), and its answer read by
/// ``AppAttestClient/AppAttestClient/complete(_:response:body:)``, which repairs a refusal of the server's App Attest
/// layer as its `action` says and sends the request again when that is safe. Whatever transport the generated client
/// uses (URLSession, AsyncHTTPClient) sends the request.
///
/// ```swift
/// let api = Client(
///     serverURL: URL(string: "https://api.example.com")!, transport: URLSessionTransport(),
///     middlewares: [AppAttestClientMiddleware(client: appAttest)])
/// ```
///
/// Put it last among the middlewares, next to the transport: the request it signs must be the one that travels (a
/// middleware after it that changed the path, the query or the body would break the signature).
public struct AppAttestClientMiddleware: ClientMiddleware {
    /// The app client that signs.
    public let client: AppAttestClient
    /// The largest request body signed, in bytes (the body is hashed, so it is collected first).
    public let maximumRequestBodySize: Int
    /// Whether an operation may run twice (``AppAttestClient/AppAttestClient/sign(_:isIdempotent:)``); by default
    /// nil for every operation, which judges by the HTTP method.
    public let isIdempotent: @Sendable (_ operationID: String) -> Bool?

    /// The middleware for `client`.
    public init(
        client: AppAttestClient, maximumRequestBodySize: Int = 1 << 20,
        isIdempotent: @escaping @Sendable (_ operationID: String) -> Bool? = { _ in nil }
    ) {
        self.client = client
        self.maximumRequestBodySize = maximumRequestBodySize
        self.isIdempotent = isIdempotent
    }

    /// The largest refusal body read to learn its `action`.
    static let maximumProblemSize = 16 * 1024

    /// Signs the request, sends it through `next`, and completes it with the answer; a repaired refusal is sent
    /// again, signed again.
    public func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var bytes: Data?
        if let body { bytes = try await Data(collecting: body, upTo: maximumRequestBodySize) }
        var signed = try await client.sign(
            try Self.urlRequest(request, body: bytes, baseURL: baseURL), isIdempotent: isIdempotent(operationID))
        while true {
            var outgoing = request
            for (name, value) in signed.headerFields {
                guard let field = HTTPField.Name(name) else { continue }
                outgoing.headerFields[field] = value
            }
            let response: HTTPResponse, responseBody: HTTPBody?
            do {
                (response, responseBody) = try await next(outgoing, bytes.map { HTTPBody($0) }, baseURL)
            } catch {
                await client.abandon(signed)
                throw error
            }
            // Only a problem document can be a refusal: any other answer passes through untouched, streamed.
            var read: Data?
            if response.status.code >= 400,
                response.headerFields[.contentType]?.hasPrefix("application/problem+json") == true,
                let responseBody
            {
                read = try? await Data(collecting: responseBody, upTo: Self.maximumProblemSize)
            }
            let completion = try await client.complete(
                signed, response: try Self.urlResponse(response, url: signed.request.url), body: read ?? Data())
            switch completion {
            case .answered: return (response, read.map { HTTPBody($0) } ?? responseBody)
            case .resend(let next): signed = next
            }
        }
    }

    /// The request as it travels: the base URL's percent-encoded path followed by the operation's path, and the
    /// operation's query, joined as swift-openapi-async-http-client and swift-openapi-urlsession join them (a base URL
    /// ending in `/` gives `//`), so that the target signed is the one the server receives.
    static func urlRequest(_ request: HTTPRequest, body: Data?, baseURL: URL) throws -> URLRequest {
        guard var components = URLComponents(string: baseURL.absoluteString),
            let operation = URLComponents(string: request.path ?? "")
        else { throw URLError(.badURL) }
        components.percentEncodedPath += operation.percentEncodedPath
        components.percentEncodedQuery = operation.percentEncodedQuery
        guard let url = components.url else { throw URLError(.badURL) }
        var urlRequest = URLRequest(url: url)
        urlRequest.httpMethod = request.method.rawValue
        for field in request.headerFields { urlRequest.addValue(field.value, forHTTPHeaderField: field.name.rawName) }
        urlRequest.httpBody = body
        return urlRequest
    }

    static func urlResponse(_ response: HTTPResponse, url: URL?) throws -> HTTPURLResponse {
        var fields: [String: String] = [:]
        for field in response.headerFields { fields[field.name.rawName] = field.value }
        guard let url,
            let converted = HTTPURLResponse(
                url: url, statusCode: response.status.code, httpVersion: "HTTP/1.1", headerFields: fields)
        else { throw URLError(.badServerResponse) }
        return converted
    }
}
#endif  // ClientMiddleware
