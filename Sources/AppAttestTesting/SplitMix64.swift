/// A small seeded generator, so that any failure is reproducible from its seed and round.
package struct SplitMix64: RandomNumberGenerator {
    package var state: UInt64
    package init(seed: UInt64) {
        // Mix the seed, so that consecutive seeds do not give overlapping streams.
        var z = seed &+ 0x2545_F491_4F6C_DD1D
        z = (z ^ (z >> 33)) &* 0xFF51_AFD7_ED55_8CCD
        z = (z ^ (z >> 33)) &* 0xC4CE_B9FE_1A85_EC53
        state = z ^ (z >> 33)
    }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    package mutating func next(below bound: Int) -> Int { Int(next() % UInt64(bound)) }
}
