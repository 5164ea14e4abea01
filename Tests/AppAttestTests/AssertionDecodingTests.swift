import AppAttest
import AppAttestCBOR
import AppAttestVectors
import Foundation
import Testing

/// The assertion decoder's direct path for the layout devices produce must accept only what the general CBOR decoder
/// accepts, with the same values.
@Suite("Assertion decoding: the direct path and the general decoder agree")
struct AssertionDecodingTests {
    /// The assertions of the real-device vectors.
    static let assertions: [[UInt8]] = realDevices.entries.compactMap { entry in
        if case .vector(let vector) = entry { return vector.assertion }
        return nil
    }

    /// The signature and authenticator data the general decoder finds, or nil when it refuses the bytes.
    static func general(_ bytes: [UInt8]) -> (signature: [UInt8], authenticatorData: [UInt8])? {
        guard let root = try? CBORDecoder(maximumInputSize: 16 * 1024, maximumDepth: 4).decode(bytes),
            case .map(let entries) = root, entries.count == 2,
            case .byteString(let signature) = root["signature"],
            case .byteString(let authenticatorData) = root["authenticatorData"]
        else { return nil }
        return (signature, authenticatorData)
    }

    @Test("every real assertion takes the direct path")
    func realAssertions() throws {
        #expect(!Self.assertions.isEmpty)
        for assertion in Self.assertions {
            let direct = try #require(AssertionObject.canonicalFields(assertion))
            let decoded = try #require(Self.general(assertion))
            #expect(direct.signature == decoded.signature && direct.authenticatorData == decoded.authenticatorData)
        }
    }

    @Test("every one-byte change, truncation and extension the direct path accepts, the general decoder reads alike")
    func mutations() throws {
        var accepted = 0
        for assertion in Self.assertions {
            var variants: [[UInt8]] = []
            for index in assertion.indices {
                for value: UInt8 in [
                    0x00, 0x01, 0x17, 0x18, 0x19, 0x1F, 0x40, 0x58, 0x59, 0x5F, 0x60, 0xA1, 0xA3, 0xFF,
                ] {
                    var changed = assertion
                    changed[index] = value
                    variants.append(changed)
                }
                variants.append(Array(assertion[..<index]))
            }
            variants.append(assertion + [0x00])
            for variant in variants {
                guard let direct = AssertionObject.canonicalFields(variant) else { continue }
                accepted += 1
                let decoded = Self.general(variant)
                #expect(
                    decoded?.signature == direct.signature && decoded?.authenticatorData == direct.authenticatorData,
                    "the direct path read bytes the general decoder reads otherwise or refuses")
            }
        }
        #expect(accepted > 0)
    }

    @Test("other layouts are left to the general decoder: keys swapped still read, a long-form length is declined")
    func layouts() throws {
        let signature = [UInt8](repeating: 0x30, count: 70)
        let data = [UInt8](repeating: 0xAB, count: 37)
        let key = { (text: String) in [UInt8(0x60 + text.utf8.count)] + Array(text.utf8) }
        let swapped =
            [0xA2] + key("authenticatorData") + [0x58, 37] + data + key("signature") + [0x58, 70] + signature
        let direct = try #require(AssertionObject.canonicalFields(swapped))
        #expect(direct.signature == signature && direct.authenticatorData == data)
        // A length of 37 written in two bytes: valid CBOR, not the shortest form.
        let longForm =
            [0xA2] + key("signature") + [0x58, 70] + signature + key("authenticatorData") + [0x59, 0, 37] + data
        #expect(AssertionObject.canonicalFields(longForm) == nil)
        #expect(Self.general(longForm) != nil, "the general decoder still reads it")
        // The same key twice.
        let twice = [0xA2] + key("signature") + [0x58, 70] + signature + key("signature") + [0x58, 70] + signature
        #expect(AssertionObject.canonicalFields(twice) == nil)
    }
}
