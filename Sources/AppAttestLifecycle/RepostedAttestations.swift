import AppAttest
import AppAttestCrypto
import Foundation
import Synchronization

/// Attestations this process verified as posted again (a lost answer's repost), by digest, for a few minutes: the same
/// bytes posted again within that time are answered without verifying their certificate chain once more. Without it,
/// anyone holding one genuine registration's body could post it in a loop, each post a full chain verification,
/// spending neither a challenge nor the attestation budget. Bounded: at most ``capacity`` digests, the oldest
/// forgotten first.
final class RepostedAttestations: Sendable {
    /// Digests kept at most.
    static let capacity = 1_024
    /// How long a verified repost is remembered: well within its certificates' validity, so that the repost is
    /// answered as a verification now would answer it.
    static let lifetime = Duration.seconds(600)

    private struct State {
        var order: [(digest: [UInt8], at: ContinuousClock.Instant)] = []
        var next = 0
        var known: [[UInt8]: ContinuousClock.Instant] = [:]
    }
    private let state = Mutex(State())

    /// The digest of what a repost must repeat exactly: the object, the keyId, the challenge and the user.
    static func digest(_ object: [UInt8], keyID: KeyID, challenge: [UInt8], userID: String?) -> [UInt8] {
        var bytes = object
        bytes += keyID.rawValue
        bytes += [UInt8(truncatingIfNeeded: challenge.count)] + challenge
        if let userID { bytes += [1] + Array(userID.utf8) } else { bytes += [0] }
        return SHA256.hash(bytes)
    }

    /// Whether `digest` was verified less than ``lifetime`` ago.
    func contains(_ digest: [UInt8]) -> Bool {
        let now = ContinuousClock.now
        return state.withLock { state in
            guard let at = state.known[digest] else { return false }
            return now - at < Self.lifetime
        }
    }

    /// Remembers a verified repost, forgetting the oldest when full.
    func insert(_ digest: [UInt8]) {
        let now = ContinuousClock.now
        state.withLock { state in
            if state.order.count < Self.capacity {
                state.order.append((digest, now))
            } else {
                let oldest = state.order[state.next]
                if state.known[oldest.digest] == oldest.at { state.known[oldest.digest] = nil }
                state.order[state.next] = (digest, now)
                state.next = (state.next + 1) % Self.capacity
            }
            state.known[digest] = now
        }
    }
}
