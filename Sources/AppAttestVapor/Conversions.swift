#if Vapor
import AppAttest
package import AppAttestHTTP
import AppAttestStore
import AppAttestLifecycle
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
package import Vapor

extension HTTPRequest {
    /// The swift-http-types head of a Vapor request: method, the target as received, header fields; nil for a
    /// method that is not an HTTP token.
    init?(_ request: Request) {
        guard let method = HTTPRequest.Method(request.method.rawValue) else { return nil }
        var fields = HTTPFields()
        for (name, value) in request.headers {
            if let name = HTTPField.Name(name) { fields.append(HTTPField(name: name, value: value)) }
        }
        self.init(
            method: method, scheme: nil, authority: nil,
            path: request.requestTarget, headerFields: fields)
    }
}

extension Request {
    /// The request target as it arrived: the percent-encoded path and query, byte for byte what the app signed.
    ///
    /// Vapor keeps no copy of the raw target, and its `URI` gives the path back with every `%3B` turned into `;` on
    /// Linux (`URI.string` and `URI.path`), so that `/a%3Bb`, signed as it travels, would be bound as `/a;b`. The
    /// components `URI` parsed from the raw target still hold it as received: read them, and fall back to
    /// `URI.string` only if a later Vapor stores them differently (the end-to-end tests would then fail on `%3B`).
    var requestTarget: String {
        guard let components = Mirror(reflecting: url).descendant("components") as? URLComponents else {
            return url.string
        }
        var target = components.percentEncodedPath
        if target.isEmpty { target = "/" }
        if let query = components.percentEncodedQuery { target += "?" + query }
        return target
    }
}

extension Response {
    /// A Vapor response for a framework-neutral one.
    package convenience init(_ response: AppAttestHTTPResponse) {
        var headers = HTTPHeaders()
        for field in response.headerFields { headers.add(name: field.name.rawName, value: field.value) }
        self.init(
            status: HTTPResponseStatus(statusCode: response.status.code), headers: headers,
            body: .init(buffer: ByteBuffer(bytes: response.body)))
    }
}
#endif  // Vapor
