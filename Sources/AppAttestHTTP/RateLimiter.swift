#if HTTP
public import Foundation
import Synchronization

/// A token bucket per caller (a key, a bearer token, an address): `burst` requests at once, refilled at
/// `ratePerSecond`. Memory is bounded: at most `maximumCallers` buckets are kept; when full, idle (refilled)
/// buckets are dropped first, then the oldest half.
public final class AppAttestRateLimiter: Sendable {
    /// Whether a request may go on.
    public enum Decision: Sendable, Hashable {
        case allowed
        /// Refused; retry after this many seconds (at least 1).
        case limited(retryAfter: Int)
    }

    /// Sustained requests per second per caller.
    public let ratePerSecond: Double
    /// Requests a caller may make at once.
    public let burst: Double
    /// How many callers' buckets are kept at most.
    public let maximumCallers: Int
    private let now: @Sendable () -> TimeInterval

    private struct Bucket {
        var tokens: Double
        var updated: TimeInterval
    }

    private let buckets = Mutex<[String: Bucket]>([:])

    /// - Parameters:
    ///   - ratePerSecond: sustained requests per second per caller (> 0).
    ///   - burst: requests a caller may make at once (≥ 1).
    ///   - maximumCallers: how many callers' buckets are kept at most (see above).
    ///   - now: a monotonic clock in seconds (tests move it).
    public init(
        ratePerSecond: Double, burst: Double, maximumCallers: Int = 100_000,
        now: @escaping @Sendable () -> TimeInterval = { ProcessInfo.processInfo.systemUptime }
    ) {
        precondition(ratePerSecond > 0 && ratePerSecond.isFinite, "ratePerSecond must be positive")
        precondition(burst >= 1 && burst.isFinite, "burst must be at least 1")
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        self.maximumCallers = max(1, maximumCallers)
        self.now = now
    }

    /// The longest Retry-After answered, in seconds (a day), whatever the rate.
    public static let maximumRetryAfter: Double = 86400

    /// How many callers have a bucket now.
    public var trackedCallers: Int { buckets.withLock { $0.count } }

    /// Whether `caller` has a token left, without taking it.
    public func check(_ caller: String) -> Decision {
        let time = now()
        return buckets.withLock { buckets in
            guard let bucket = buckets[caller] else { return .allowed }
            let tokens = refilled(bucket, at: time)
            return tokens >= 1 ? .allowed : refusal(tokens)
        }
    }

    /// Takes one token for `caller`.
    public func acquire(_ caller: String) -> Decision {
        let time = now()
        return buckets.withLock { buckets in
            var bucket = buckets[caller] ?? Bucket(tokens: burst, updated: time)
            bucket.tokens = refilled(bucket, at: time)
            bucket.updated = time
            guard bucket.tokens >= 1 else {
                buckets[caller] = bucket
                return refusal(bucket.tokens)
            }
            bucket.tokens -= 1
            if buckets[caller] == nil, buckets.count >= maximumCallers { evict(&buckets, time: time) }
            buckets[caller] = bucket
            return .allowed
        }
    }

    /// Gives back a token taken by ``acquire(_:)`` for a request that turned out not to count (an assertion that
    /// failed verification): taking first and giving back after makes the charge atomic, so that concurrent requests
    /// never pass beyond the bucket, while someone who only knows a keyId cannot drain the key's bucket.
    public func release(_ caller: String) {
        buckets.withLock { buckets in
            guard var bucket = buckets[caller] else { return }
            bucket.tokens = min(burst, bucket.tokens + 1)
            buckets[caller] = bucket
        }
    }

    /// The bucket's tokens at `time`, refilled since it was last used.
    private func refilled(_ bucket: Bucket, at time: TimeInterval) -> Double {
        min(burst, bucket.tokens + max(0, time - bucket.updated) * ratePerSecond)
    }

    /// The refusal for a bucket holding `tokens` (< 1): the wait until one token is back, bounded before the
    /// conversion so that a vanishing rate cannot overflow Int.
    private func refusal(_ tokens: Double) -> Decision {
        let wait = min(Self.maximumRetryAfter, ((1 - tokens) / ratePerSecond).rounded(.up))
        return .limited(retryAfter: max(1, Int(wait)))
    }

    private func evict(_ buckets: inout [String: Bucket], time: TimeInterval) {
        buckets = buckets.filter { time - $0.value.updated < (burst - $0.value.tokens) / ratePerSecond }
        if buckets.count >= maximumCallers {
            let keep = buckets.sorted { $0.value.updated > $1.value.updated }.prefix(maximumCallers / 2)
            buckets = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
        }
    }
}
#endif  // HTTP
