#if ServiceClient
public import Foundation
public import HTTPTypes
public import OpenAPIAsyncHTTPClient
public import OpenAPIRuntime

/// Adds `Authorization: Bearer <token>` to every request: the service's `/v1` operations need a caller token
/// (“Running the verification service”).
public struct BearerTokenMiddleware: ClientMiddleware {
    /// The caller token.
    let token: String

    /// A middleware that sends `token`.
    public init(token: String) { self.token = token }

    /// Adds the header and passes the request on.
    public func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        request.headerFields[.authorization] = "Bearer \(token)"
        return try await next(request, body, baseURL)
    }
}

extension Client {
    /// A client of the service at `serverURL` (for example `http://127.0.0.1:8080`) that sends `token`, over
    /// AsyncHTTPClient.
    ///
    /// ```swift
    /// let service = Client(serverURL: URL(string: "http://appattest:8080")!, token: token)
    /// let key = try await service.verifyAssertion(body: .json(.init(keyId: keyID, assertion: assertion,
    ///     request: .init(method: "POST", pathAndQuery: "/api/orders", bodySha256: bodyHash, challenge: challenge))))
    ///     .ok.body.json
    /// ```
    public init(
        serverURL: URL, token: String,
        transport: AsyncHTTPClientTransport = AsyncHTTPClientTransport()
    ) {
        self.init(serverURL: serverURL, transport: transport, middlewares: [BearerTokenMiddleware(token: token)])
    }
}
#endif  // ServiceClient
