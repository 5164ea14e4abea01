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
///
/// By default it uses a session of its own that the client's requests need: no URL cache (an answer must never come
/// from a cache: a next challenge used twice is refused), the app's shared cookies, and no redirects followed (a
/// signed request's header fields must not travel to another target, where they would be refused or leak): a 3xx
/// answer is returned as it came.
public struct URLSessionClientTransport: AppAttestClientTransport {
    /// The session requests go through.
    public let session: URLSession

    /// A transport on `session`. Give your own session only if it keeps the default's rules: no cache, and no
    /// redirects followed for signed requests.
    public init(session: URLSession) { self.session = session }

    /// A transport on a session without cache that does not follow redirects.
    public init() { self.init(session: Self.defaultSession) }

    /// The default session, shared by every default transport.
    static let defaultSession: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieStorage = HTTPCookieStorage.shared
        return URLSession(configuration: configuration, delegate: RedirectRefusal(), delegateQueue: nil)
    }()

    /// Answers every redirect with the 3xx response itself.
    final class RedirectRefusal: NSObject, URLSessionTaskDelegate, Sendable {
        func urlSession(
            _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
            newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
        ) {
            completionHandler(nil)
        }
    }

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
