import AppAttest
package import AppAttestStore

extension AssertionAcceptance {
    /// The rounds a batch of counter acceptances takes as `UPDATE … FROM` statements, which apply one input row per
    /// key: each round holds a key at most once and at most `maximumSize` acceptances, and a key's acceptances keep
    /// their order across rounds. `order` is the batch's indices in the order the statements take them.
    package static func rounds(_ batch: [AssertionAcceptance], order indices: [Int], maximumSize: Int = .max)
        -> [[Int]]
    {
        let size = max(maximumSize, 1)
        // The usual batch, a few distinct keys: one round, found without hashing.
        if indices.count <= min(size, 16) {
            var distinct = true
            search: for (position, index) in indices.enumerated() {
                for earlier in indices[..<position] where batch[earlier].keyID == batch[index].keyID {
                    distinct = false
                    break search
                }
            }
            if distinct { return indices.isEmpty ? [] : [indices] }
        }
        var rounds: [[Int]] = []
        var occurrences: [KeyID: Int] = [:]
        for index in indices {
            let round = occurrences[batch[index].keyID, default: 0]
            occurrences[batch[index].keyID] = round + 1
            if round == rounds.count { rounds.append([]) }
            rounds[round].append(index)
        }
        // A full round is split in place: its parts still hold each key once, and they run before the next round.
        return rounds.flatMap { round in
            stride(from: 0, to: round.count, by: size).map { Array(round[$0..<min($0 + size, round.count)]) }
        }
    }

    /// The outcomes, in the batch's order, of the acceptances the rounds' statements accepted (`accepted[round]`
    /// holds, for each acceptance of that round in its order, the key's highest counter after the round, or nil when
    /// the statement refused it); nil for the refused ones, which the store then explains.
    package static func acceptedOutcomes(
        _ batch: [AssertionAcceptance], rounds: [[Int]], accepted: [[Int64?]]
    ) -> [AssertionAcceptanceOutcome?] {
        var outcomes = [AssertionAcceptanceOutcome?](repeating: nil, count: batch.count)
        for (round, indices) in rounds.enumerated() {
            for (position, index) in indices.enumerated() {
                if let highest = accepted[round][position] {
                    outcomes[index] = .accepted(highestCounter: UInt32(clamping: highest))
                }
            }
        }
        return outcomes
    }
}
