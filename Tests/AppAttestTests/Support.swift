@_spi(FixedVerificationTime) import AppAttest
import AppAttestCBOR
import AppAttestVectors
import Foundation
import Testing

/// The repository's TestVectors folder, found from this file's path so tests run from any directory.
let testVectorsDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("TestVectors")

/// Loads a vector file from TestVectors/ (one generic loader for every file).
func loadVectorFile(_ name: String) throws -> TestVectorFile {
    try TestVectorFile(jsonData: Data(contentsOf: testVectorsDirectory.appendingPathComponent(name)))
}

/// The vectors of the real-device file, by id.
let realDevices: TestVectorFile = try! loadVectorFile("real-devices.json")

func realVector(_ id: String) -> TestVector {
    for case .vector(let vector) in realDevices.entries where vector.id == id { return vector }
    fatalError("no vector \(id) in real-devices.json")
}

/// A verifier configured for an attestation vector, at its verifyAt.
func makeVerifier(for vector: TestVector, leeway: TimeInterval = 0) throws -> AppAttestVerifier {
    try AppAttestVerifier(
        configuration: .init(
            appID: vector.appID, environment: vector.environment!, verificationTime: .fixed(vector.verifyAt!),
            clockSkewLeeway: leeway))
}

/// Re-encodes CBOR, for tests that build altered objects.
enum CBORWriter {
    static func encode(_ value: CBORValue) -> [UInt8] { CBOREncoder.encode(value) }
}

/// Expects `body` to throw an ``AppAttestError`` with `code`, and says which code came instead.
func expectCode(
    _ code: AppAttestError.Code, _ comment: String = "", sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> Void
) {
    do {
        try body()
        Issue.record("expected \(code), but it succeeded. \(comment)", sourceLocation: sourceLocation)
    } catch let error as AppAttestError {
        #expect(error.code == code, "\(comment): \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(code), got \(error). \(comment)", sourceLocation: sourceLocation)
    }
}
