#if AppleServerAPI
public import AsyncHTTPClient
public import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// When to try a request again: only where a retry can help (429, 5xx, no answer), with exponential backoff and
/// jitter, a bounded number of attempts, and `Retry-After` honoured up to the maximum backoff.
public struct RetryPolicy: Sendable {
    /// Attempts in all, the first included.
    public var maximumAttempts: Int
    /// The wait before the second attempt, in seconds; doubled for each further one.
    public var initialBackoff: TimeInterval
    /// The longest wait between attempts, in seconds.
    public var maximumBackoff: TimeInterval

    /// A retry policy.
    public init(maximumAttempts: Int = 3, initialBackoff: TimeInterval = 0.2, maximumBackoff: TimeInterval = 5) {
        self.maximumAttempts = max(1, min(maximumAttempts, 10))
        self.initialBackoff = max(0, initialBackoff)
        self.maximumBackoff = max(self.initialBackoff, maximumBackoff)
    }

    /// One attempt, no retry.
    public static let none = RetryPolicy(maximumAttempts: 1)

    func delay(afterAttempt attempt: Int, retryAfter: TimeInterval?) -> TimeInterval {
        if let retryAfter { return min(max(0, retryAfter), maximumBackoff) }
        let exponential = initialBackoff * pow(2, Double(attempt - 1))
        return min(maximumBackoff, exponential * Double.random(in: 0.5...1.0))
    }
}

/// Where a client sends its requests.
public struct AppleEndpoint: Sendable, Hashable {
    /// Scheme, host and optional port, without a trailing slash, e.g. `https://api.devicecheck.apple.com`.
    public let baseURL: String
    /// The host, for errors and logs.
    public var host: String { URL(string: baseURL)?.host ?? baseURL }

    /// A base URL of your own (a stand-in server in tests, a proxy).
    /// - Throws: ``AppleAPIError`` (`invalidCredentials` is not right; `badPayload`, request fault) for a URL
    ///   that is not http(s).
    public init(baseURL: String) throws(AppleAPIError) {
        guard let url = URL(string: baseURL), let scheme = url.scheme, ["http", "https"].contains(scheme),
            url.host != nil
        else {
            throw AppleAPIError(
                .badPayload, fault: .request,
                "base URL \(AppleAPIError.sanitizedExcerpt(baseURL)) is not an http(s) URL")
        }
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
    }

    init(trusted baseURL: String) { self.baseURL = baseURL }
}

extension HTTPClient {
    /// The clients' default: `HTTPClient.shared`'s configuration, but redirects are not followed. Apple's endpoints
    /// answer without one, and a redirect (a hostile endpoint, an intercepting proxy) would otherwise carry the device
    /// token or the receipt, which a 307 or 308 posts again, to another host, or from https to http.
    public static let appleAPI: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }()
}

/// Sends POSTs with timeouts, bounded bodies and retries.
struct Transport: Sendable {
    let client: HTTPClient
    let endpoint: AppleEndpoint
    let timeout: TimeInterval
    let retry: RetryPolicy
    let logger: Logger

    static let maximumResponseSize = 256 * 1024

    struct Response {
        var status: Int
        var body: String
        var headers: HTTPHeaders
    }

    /// POSTs `body()` (rebuilt for every attempt, for fresh transaction ids and timestamps) to `path`.
    /// Returns the first response that is not retryable, or the last one.
    func post(
        _ path: String, authorization: @Sendable () async throws(AppleAPIError) -> String,
        contentType: String?, body: @Sendable () throws(AppleAPIError) -> [UInt8]
    ) async throws(AppleAPIError) -> Response {
        var attempt = 0
        while true {
            attempt += 1
            let result: Result<Response, AppleAPIError>
            do {
                result = .success(
                    try await once(
                        path, authorization: try await authorization(), contentType: contentType, body: try body()))
            } catch {
                result = .failure(error)
            }
            let retryable: Bool
            var retryAfter: TimeInterval?
            switch result {
            case .success(let response):
                retryable = response.status == 429 || response.status >= 500
                retryAfter = response.headers.first(name: "Retry-After").flatMap(TimeInterval.init)
            case .failure(let error):
                retryable = error.fault == .network
            }
            guard retryable, attempt < retry.maximumAttempts else { return try result.get() }
            let delay = retry.delay(afterAttempt: attempt, retryAfter: retryAfter)
            logger.debug(
                "retrying Apple request", metadata: ["path": "\(path)", "attempt": "\(attempt)", "delay": "\(delay)"])
            try? await Task.sleep(nanoseconds: UInt64(delay * 1_000_000_000))
        }
    }

    private func once(_ path: String, authorization: String, contentType: String?, body: [UInt8])
        async throws(AppleAPIError) -> Response
    {
        var request = HTTPClientRequest(url: endpoint.baseURL + path)
        request.method = .POST
        request.headers.add(name: "Authorization", value: authorization)
        if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await client.execute(request, timeout: .milliseconds(Int64(timeout * 1000)))
            let buffer = try await response.body.collect(upTo: Self.maximumResponseSize)
            return Response(status: Int(response.status.code), body: String(buffer: buffer), headers: response.headers)
        } catch let error as NIOTooManyBytesError {
            throw AppleAPIError(
                .unexpectedResponse, fault: .apple, host: endpoint.host,
                "response larger than \(Self.maximumResponseSize) bytes: \(error)")
        } catch {
            throw AppleAPIError(.transport, fault: .network, host: endpoint.host, "\(error)")
        }
    }
}
#endif  // AppleServerAPI
