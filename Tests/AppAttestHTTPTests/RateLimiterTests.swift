#if HTTP
import AppAttestHTTP
import Synchronization
import Testing

@Suite("Rate limiter")
struct RateLimiterTests {
    final class Clock: Sendable {
        let time = Mutex(0.0)
        func advance(_ seconds: Double) { time.withLock { $0 += seconds } }
    }

    @Test("a burst, then one request per 1/rate seconds; callers are independent")
    func tokenBucket() {
        let clock = Clock()
        let limiter = AppAttestRateLimiter(ratePerSecond: 2, burst: 3) { clock.time.withLock { $0 } }
        for _ in 0..<3 { #expect(limiter.acquire("a") == .allowed) }
        #expect(limiter.acquire("a") == .limited(retryAfter: 1))
        #expect(limiter.acquire("b") == .allowed)
        clock.advance(0.5)
        #expect(limiter.acquire("a") == .allowed)
        #expect(limiter.acquire("a") == .limited(retryAfter: 1))
        clock.advance(100)
        for _ in 0..<3 { #expect(limiter.acquire("a") == .allowed) }
        #expect(limiter.acquire("a") != .allowed)
    }

    @Test("memory stays bounded with many callers; a slow rate gives a long Retry-After")
    func bounded() {
        let clock = Clock()
        let limiter = AppAttestRateLimiter(ratePerSecond: 0.01, burst: 1, maximumCallers: 100) {
            clock.time.withLock { $0 }
        }
        for index in 0..<10_000 { #expect(limiter.acquire("caller \(index)") == .allowed) }
        #expect(limiter.trackedCallers <= 100)
        #expect(limiter.acquire("caller 9999") == .limited(retryAfter: 100))
    }
}
#endif  // HTTP
