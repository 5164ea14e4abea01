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

    /// Sends `request` with `URLSession.data(for:)` (iOS 15, macOS 12, tvOS 15, watchOS 8), or a data task before
    /// those.
    public func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let data: Data, response: URLResponse
        if #available(iOS 15.0, macOS 12.0, tvOS 15.0, watchOS 8.0, *) {
            (data, response) = try await session.data(for: request)
        } else {
            (data, response) = try await withCheckedThrowingContinuation { continuation in
                session.dataTask(with: request) { data, response, error in
                    if let data, let response {
                        continuation.resume(returning: (data, response))
                    } else {
                        continuation.resume(throwing: error ?? URLError(.badServerResponse))
                    }
                }.resume()
            }
        }
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        return (data, http)
    }
}
