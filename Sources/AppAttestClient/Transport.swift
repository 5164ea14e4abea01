public import Foundation

#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

/// Sends the client's HTTP requests: ``URLSessionClientTransport`` by default, or your own (a configured
/// `URLSession`, an HTTP client with certificate pinning, a test double).
public protocol AppAttestClientTransport: Sendable {
    /// Sends `request` and returns the body and the response head.
    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse)
}

/// A transport on `URLSession` (FoundationNetworking on Linux).
public struct URLSessionClientTransport: AppAttestClientTransport {
    /// The session requests go through.
    public let session: URLSession

    /// A transport on `session` (`URLSession.shared` by default).
    public init(session: URLSession = .shared) { self.session = session }

    /// Sends `request` with `URLSession.data(for:)`.
    public func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let (data, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        return (data, http)
    }
}
