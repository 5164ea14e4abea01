#if Service
import AppAttest
import AppAttestWire
import AppAttestServer
import AppAttestStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import OpenAPIKit
import Testing
import Yams

@Suite("appattest serve: OpenAPI document")
struct OpenAPITests {
    static let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/AppAttestServer/openapi.yaml")

    @Test("openapi.yaml is a valid OpenAPI 3.1 document, and every operation in it exists on the server")
    func documentMatchesServer() async throws {
        let text = try String(contentsOf: Self.path, encoding: .utf8)
        let document = try YAMLDecoder().decode(OpenAPI.Document.self, from: text)
        try document.validate()
        let keyID = RequestBindingLayout.base64URL([UInt8](repeating: 9, count: 32))
        let operations = try await Fixture.withServer { _, client in
            var operations = 0
            for (path, item) in document.paths {
                guard case .b(let pathItem) = item else { continue }
                let uri = path.rawValue.replacingOccurrences(of: "{keyId}", with: keyID)
                for endpoint in pathItem.endpoints {
                    let method = HTTPRequest.Method(endpoint.method.rawValue)!
                    let response = try await client.execute(
                        uri: uri, method: method, headers: Fixture.headers(), body: ByteBuffer(string: "{}"))
                    // The route exists: an answer of the operation (possibly a problem about the empty body or the
                    // unknown key), never the router's 404 without a problem body or a 405.
                    let isRouterMiss =
                        response.status == .notFound && response.headers[.contentType] != "application/problem+json"
                    #expect(!isRouterMiss && response.status != .methodNotAllowed, "\(endpoint.method) \(uri)")
                    operations += 1
                }
            }
            return operations
        }
        #expect(operations == 13)
    }
}
#endif  // Service
