import AppAttest
import AppAttestTesting
import AppAttestVectors
import Foundation
import Testing

@Suite("Synthetic vectors")
struct SyntheticVectorTests {
    static let attestationReasons: Set<String> = [
        "malformed", "certificateChain", "certificateValidity", "nonceMismatch", "keyIdMismatch", "publicKeyMismatch",
        "appIdMismatch", "counterNotZero", "environmentMismatch", "credentialIdMismatch",
    ]
    static let assertionReasons: Set<String> = [
        "malformed", "signatureInvalid", "appIdMismatch", "counterNotIncreasing",
    ]

    func check(_ file: TestVectorFile, name: String) {
        var reasons: [TestVector.Kind: Set<String>] = [:]
        var counters = Set<UInt32>()
        var withExtensions = 0
        for entry in file.entries {
            guard case .vector(let vector) = entry else {
                Issue.record("\(name): vector \(entry.id) unreadable")
                continue
            }
            let outcome = TestVectorRunner(file: file).run(vector)
            #expect(outcome.passed, "\(name) vector \(vector.id): expected \(outcome.expected), got \(outcome.got)")
            if case .invalid(let list) = vector.expect { reasons[vector.kind, default: []].formUnion(list) }
            if case .valid(let counter?) = vector.expect { counters.insert(counter) }
            if let previous = vector.previousCounter { counters.insert(previous) }
            let bytes = vector.attestation ?? vector.assertion ?? []
            if bytes.windowCount(of: Array("apple_bundle_version_01".utf8)) > 0 { withExtensions += 1 }
        }
        #expect(reasons[.attestation, default: []].isSuperset(of: Self.attestationReasons), "\(name)")
        #expect(reasons[.assertion, default: []].isSuperset(of: Self.assertionReasons), "\(name)")
        #expect(counters.isSuperset(of: [0, 1, .max]), "\(name): boundary counters")
        #expect(withExtensions >= 2, "\(name): iOS 27 extension data in attestations and assertions")
        #expect(!file.trustAnchor.isAppleAppAttestationRoot)
    }

    @Test("a freshly generated file covers every reason and passes")
    func generated() throws {
        check(try TestVectorFile(jsonData: try SyntheticVectors.generate()), name: "generated")
    }

    @Test("the committed TestVectors/synthetic.json covers every reason and passes")
    func committed() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("TestVectors/synthetic.json")
        check(try TestVectorFile(jsonData: Data(contentsOf: url)), name: "synthetic.json")
    }
}

extension Array where Element == UInt8 {
    func windowCount(of needle: [UInt8]) -> Int {
        guard needle.count <= count else { return 0 }
        return (0...(count - needle.count)).filter { self[$0..<($0 + needle.count)].elementsEqual(needle) }.count
    }
}
