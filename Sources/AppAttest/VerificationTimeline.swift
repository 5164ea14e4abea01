import Foundation

/// When each step of one verification ended, for traces: the service turns the marks into spans
/// (`AppAttestService`, “Operating App Attest in production”). Recorded only when asked for (an optional the verifier
/// fills), so that a verification without traces reads no clock.
package struct VerificationTimeline: Sendable {
    /// A step's name and the instant it ended, in nanoseconds since 1970.
    package struct Mark: Sendable, Hashable {
        package let step: String
        package let end: UInt64
    }

    /// When the verification started, in nanoseconds since 1970.
    package let start: UInt64
    /// The steps in the order they ended; a failed step ends with its failure.
    package private(set) var marks: [Mark] = []

    package init() {
        start = Self.now()
        marks.reserveCapacity(5)
    }

    package mutating func mark(_ step: String) {
        marks.append(Mark(step: step, end: Self.now()))
    }

    /// Nanoseconds since 1970, from the system clock (what tracers timestamp spans with).
    package static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
