extension AppAttestVerifier {
    /// Which assertion counters a key may present (<doc:VerifyingAssertions>, “Counters”).
    ///
    /// Apple's rule is a strictly increasing counter, and it is the default. An app that sends requests concurrently
    /// generates assertions 5, 6, 7 that may arrive as 7, 5, 6: the strict rule refuses 5 and 6. With a reorder
    /// window, each counter value is still accepted at most once, in any order within the window (the highest
    /// accepted counter and the ones below it, like IPsec's anti-replay window); anything older is refused.
    ///
    /// The verifier refuses a counter the policy can never admit (``admits(_:highest:)``); which counters within the
    /// window were already used is known only to the store, whose acceptance applies ``advance(highest:seen:counter:)``
    /// atomically. One rule, in one type, applied by both.
    public struct CounterPolicy: Sendable, Hashable {
        /// How many counters, the highest accepted one included, may be accepted in any order (1 to
        /// ``maximumWindow``).
        public let window: Int

        /// Only counters above the highest accepted one (Apple's rule).
        public static let strictlyIncreasing = CounterPolicy(window: 1)

        /// Counters not yet accepted within `size` of the highest (sizes below 1 are 1, above ``maximumWindow`` are
        /// ``maximumWindow``).
        public static func reorderWindow(_ size: Int) -> CounterPolicy {
            CounterPolicy(window: min(max(size, 1), maximumWindow))
        }

        /// The largest window: the highest counter and the 63 below it (one 63-bit mask beside the counter).
        public static let maximumWindow = 64

        private init(window: Int) { self.window = window }

        /// Whether `counter` can ever be accepted for a key whose highest accepted counter is `highest`: above it or,
        /// with a window, within it. Which counters within the window were already used, the highest included, only
        /// the store knows: it refuses them as replays when it applies ``advance(highest:seen:counter:)``.
        public func admits(_ counter: UInt32, highest: UInt32) -> Bool {
            counter > highest || (window > 1 && counter > 0 && UInt64(highest - counter) < UInt64(window))
        }

        /// The verifier's error for a counter the policy does not admit (``admits(_:highest:)`` is false):
        /// `counterNotIncreasing`. The service answers the same when the store's acceptance finds the counter below a
        /// highest counter the service had not read (a key read without its counter, or advanced by another process).
        package func refusal(_ counter: UInt32, highest: UInt32) -> AppAttestError {
            AppAttestError(
                .counterNotIncreasing,
                window == 1
                    ? "counter \(counter) is not greater than \(highest)"
                    : "counter \(counter) is outside the window of \(window) below \(highest)")
        }

        /// The counter state after accepting `counter` into (`highest`, `seen`), or nil when it is refused: the rule
        /// every store applies in the transaction that accepts an assertion. Bit `d - 1` of `seen` records that
        /// `highest - d` was accepted, for `d` in 1...63.
        public func advance(highest: UInt32, seen: UInt64, counter: UInt32) -> (highest: UInt32, seen: UInt64)? {
            if counter > highest {
                let shift = UInt64(counter - highest)
                if shift >= 64 { return (counter, 0) }
                let kept = (seen & ((UInt64(1) << (63 - shift)) - 1)) << shift
                return (counter, kept | (UInt64(1) << (shift - 1)))
            }
            let distance = UInt64(highest - counter)
            guard distance >= 1, distance <= UInt64(window - 1) else { return nil }
            let bit = UInt64(1) << (distance - 1)
            guard seen & bit == 0 else { return nil }
            return (highest, seen | bit)
        }

        /// The window's mask of a key whose history below its highest counter is not known (a key stored before the
        /// window existed): every counter below the highest counts as used, all 63 bits set.
        package static let allBelowHighestSeen = Int64.max
    }
}
