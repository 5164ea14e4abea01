import AppAttest
import AppAttestVectors
import Foundation
import Testing

@Suite("Real-device vectors (TestVectors/real-devices.json)")
struct RealDeviceVectorTests {
    static let ids: [String] = realDevices.entries.map(\.id)

    @Test("the file holds the 74 published vectors, all readable")
    func fileShape() {
        #expect(realDevices.entries.count == 74)
        for entry in realDevices.entries {
            if case .unreadable(let id, let reason) = entry { Issue.record("vector \(id) unreadable: \(reason)") }
        }
        #expect(realDevices.trustAnchor == .appleAppAttestationRoot)
    }

    @Test("every vector has the expected outcome", arguments: ids)
    func vector(_ id: String) {
        let outcome = TestVectorRunner(file: realDevices).run(realVector(id))
        #expect(outcome.passed, "vector \(id): expected \(outcome.expected), got \(outcome.got)")
    }
}

@Suite("Every vector file in TestVectors/")
struct AllVectorFilesTests {
    static let files: [String] =
        (try? FileManager.default.contentsOfDirectory(atPath: testVectorsDirectory.path))?
        .filter { $0.hasSuffix(".json") }.sorted() ?? []

    @Test("the folder holds the real-device file and Apple's 2026 sample")
    func present() {
        #expect(Self.files.contains("real-devices.json"))
        #expect(Self.files.contains("apple-docs-2026.json"))
    }

    @Test("every vector of every file has its expected outcome", arguments: files)
    func file(_ name: String) throws {
        let file = try loadVectorFile(name)
        #expect(!file.entries.isEmpty)
        for outcome in TestVectorRunner(file: file).run() {
            #expect(outcome.passed, "\(name) vector \(outcome.id): expected \(outcome.expected), got \(outcome.got)")
        }
    }

    @Test("Apple's 2026 sample: extended key usage leaf, iOS 27 extensions with ED clear")
    func apple2026() throws {
        let file = try loadVectorFile("apple-docs-2026.json")
        guard case .vector(let vector) = file.entries[0] else { Issue.record("unreadable"); return }
        let verifier = try makeVerifier(for: vector)
        let result = try verifier.verifyAttestation(
            vector.attestation!, keyID: vector.keyID!, clientDataHash: vector.clientDataHash!)
        #expect(result.authenticatorData.rawRepresentation.count == 226)
        #expect(!result.authenticatorData.flags.contains(.extensionData))
        #expect(result.extensions?.bundleVersion == "1")
        #expect(result.extensions?.validationCategoryBytes == [1, 0, 0, 0])
        #expect(result.extensions?.validationCategory == 1)
        #expect(result.osVersion == "27.0")
        let leaf = try CertificateSummary(derEncoded: result.certificateChain[0])
        #expect(leaf.extensions.contains { $0.oid == "2.5.29.37" && $0.value.contains("2a864886f763640418") })
        #expect(leaf.appID == "1234567890.com.example.myapp")
    }
}
