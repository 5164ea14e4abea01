import AppAttest
import AppAttestStore
import Testing

/// How a batch of counter acceptances is cut into `UPDATE … FROM` rounds, and how the rounds' results map back.
@Suite("Acceptance rounds")
struct AcceptanceRoundsTests {
    static func key(_ byte: UInt8) -> KeyID { try! KeyID(rawValue: [UInt8](repeating: byte, count: 32)) }
    static func batch(_ keys: [UInt8]) -> [AssertionAcceptance] {
        keys.enumerated().map {
            .init(keyID: key($1), counter: UInt32($0 + 1), counterPolicy: .strictlyIncreasing, challenge: nil)
        }
    }

    @Test("distinct keys are one round, in the given order; a repeated key starts the next round")
    func rounds() {
        let distinct = Self.batch([1, 2, 3, 4, 5, 6, 7])
        #expect(AssertionAcceptance.rounds(distinct, order: [6, 0, 5, 1, 4, 2, 3]) == [[6, 0, 5, 1, 4, 2, 3]])
        #expect(
            AssertionAcceptance.rounds(distinct, order: Array(distinct.indices), maximumSize: 3) == [
                [0, 1, 2], [3, 4, 5], [6],
            ])
        #expect(AssertionAcceptance.rounds([], order: []).isEmpty)
        // Key 1 three times, key 2 twice: each key's acceptances keep their order across rounds.
        let repeated = Self.batch([1, 2, 1, 3, 1, 2])
        #expect(AssertionAcceptance.rounds(repeated, order: Array(repeated.indices)) == [[0, 1, 3], [2, 5], [4]])
        // More distinct keys than the quick search takes, with one repeat at the end.
        let many = Self.batch(Array(1...40) + [7])
        #expect(AssertionAcceptance.rounds(many, order: Array(many.indices)) == [Array(0..<40), [40]])
        #expect(
            AssertionAcceptance.rounds(many, order: Array(many.indices), maximumSize: 16)
                == [Array(0..<16), Array(16..<32), Array(32..<40), [40]])
    }

    @Test("outcomes follow each round's positions; refused ones stay nil")
    func outcomes() {
        let batch = Self.batch([1, 2, 1])
        let rounds = AssertionAcceptance.rounds(batch, order: [2, 1, 0])
        #expect(rounds == [[2, 1], [0]])
        let outcomes = AssertionAcceptance.acceptedOutcomes(batch, rounds: rounds, accepted: [[9, nil], [nil]])
        #expect(outcomes == [nil, nil, .accepted(highestCounter: 9)])
    }
}
