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
            path: request.url.string, headerFields: fields)
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
