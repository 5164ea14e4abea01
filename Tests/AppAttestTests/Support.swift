import AppAttest
import AppAttestVectors
import Foundation
import Testing

/// The repository's TestVectors folder, found from this file's path so tests run from any directory.
let testVectorsDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("TestVectors")

/// Loads a vector file from TestVectors/ (one generic loader for every file, STYLE rule 11).
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

/// Re-encodes CBOR in canonical definite-length form, for tests that build altered objects.
enum CBORWriter {
    static func encode(_ value: CBORValue) -> [UInt8] {
        switch value {
        case .unsignedInteger(let n): return head(0, n)
        case .negativeInteger(let n): return head(1, n)
        case .byteString(let bytes): return head(2, UInt64(bytes.count)) + bytes
        case .textString(let text): return head(3, UInt64(text.utf8.count)) + Array(text.utf8)
        case .array(let items): return head(4, UInt64(items.count)) + items.flatMap(encode)
        case .map(let entries):
            return head(5, UInt64(entries.count)) + entries.flatMap { encode($0.key) + encode($0.value) }
        case .tagged(let tag, let inner): return head(6, tag) + encode(inner)
        case .boolean(let value): return [value ? 0xF5 : 0xF4]
        case .null: return [0xF6]
        case .undefined: return [0xF7]
        case .float: fatalError("not needed by the tests")
        }
    }

    static func head(_ major: UInt8, _ value: UInt64) -> [UInt8] {
        let type = major << 5
        switch value {
        case 0..<24: return [type | UInt8(value)]
        case 24..<256: return [type | 24, UInt8(value)]
        case 256..<65536: return [type | 25, UInt8(value >> 8), UInt8(value & 0xFF)]
        case 65536..<(1 << 32):
            return [type | 26] + (0..<4).reversed().map { UInt8((value >> (8 * UInt64($0))) & 0xFF) }
        default: return [type | 27] + (0..<8).reversed().map { UInt8((value >> (8 * UInt64($0))) & 0xFF) }
        }
    }
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
