import AppAttest
import AppAttestCrypto
import Foundation
import Synchronization

/// What this process found lately of a registration posted again (a lost answer's repost), by key, for a few minutes:
/// the body verified for the key, or that one failed. The same body again is answered without verifying its
/// certificate chain once more, and any other body for the key (another challenge, altered bytes) is refused without
/// one too: only the registration's own body gets the first answer, and the full check refuses any other, since the
/// nonce binds the challenge. Without it, anyone holding a registration's body (its device's owner) could post it in a
/// loop, altered or not, each post a chain verification, spending neither a challenge nor the attestation budget.
/// Bounded: at most ``capacity`` keys, the oldest forgotten first.
final class RepostedAttestations: Sendable {
    /// Keys kept at most.
    static let capacity = 1_024
    /// How long an outcome is remembered: well within a body's certificates' validity.
    static let lifetime = Duration.seconds(600)

    /// What was found for a key: the digest of the body that verified, or nil for a failure.
    enum Outcome: Equatable {
        case verified([UInt8])
        case failed
    }

    private struct State {
        var order: [(keyID: KeyID, at: ContinuousClock.Instant)] = []
        var next = 0
        var known: [KeyID: (outcome: Outcome, at: ContinuousClock.Instant)] = [:]
    }
    private let state = Mutex(State())

    /// The digest of what a repost must repeat exactly: the object, the challenge and the user.
    static func digest(_ object: [UInt8], challenge: [UInt8], userID: String?) -> [UInt8] {
        var bytes = object
        bytes += [UInt8(truncatingIfNeeded: challenge.count)] + challenge
        if let userID { bytes += [1] + Array(userID.utf8) } else { bytes += [0] }
        return SHA256.hash(bytes)
    }

    /// What was found for `keyID` less than ``lifetime`` ago, if anything.
    func outcome(for keyID: KeyID) -> Outcome? {
        let now = ContinuousClock.now
        return state.withLock { state in
            guard let known = state.known[keyID], now - known.at < Self.lifetime else { return nil }
            return known.outcome
        }
    }

    /// Remembers what was found for `keyID`, forgetting the oldest key when full.
    func record(_ outcome: Outcome, for keyID: KeyID) {
        let now = ContinuousClock.now
        state.withLock { state in
            if state.order.count < Self.capacity {
                state.order.append((keyID, now))
            } else {
                let oldest = state.order[state.next]
                if state.known[oldest.keyID]?.at == oldest.at { state.known[oldest.keyID] = nil }
                state.order[state.next] = (keyID, now)
                state.next = (state.next + 1) % Self.capacity
            }
            state.known[keyID] = (outcome, now)
        }
    }
}
