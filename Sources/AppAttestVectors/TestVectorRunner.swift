@_spi(FixedVerificationTime) import AppAttest
import Foundation

/// Runs vectors through ``AppAttestVerifier`` and compares each outcome with the vector's expectation.
public struct TestVectorRunner: Sendable {
    /// One vector's result.
    public struct Outcome: Sendable, CustomStringConvertible {
        /// The vector's identifier.
        public var id: String
        /// What the file expects.
        public var expected: String
        /// What the verifier said.
        public var got: String
        /// Whether the two agree.
        public var passed: Bool

        public var description: String {
            "\(passed ? "ok  " : "FAIL") \(id)  expected: \(expected)  got: \(got)"
        }
    }

    /// The file whose vectors are run.
    public let file: TestVectorFile

    /// A runner for the vectors of `file`.
    public init(file: TestVectorFile) { self.file = file }

    /// Runs every vector in file order.
    public func run() -> [Outcome] {
        file.entries.map { entry in
            switch entry {
            case .unreadable(let id, let reason):
                return Outcome(id: id, expected: "a readable vector", got: "unreadable: \(reason)", passed: false)
            case .vector(let vector):
                return run(vector)
            }
        }
    }

    /// Runs one vector.
    public func run(_ vector: TestVector) -> Outcome {
        let result: Result<UInt32?, AppAttestError>
        do { result = .success(try verify(vector)) } catch { result = .failure(error) }
        let passed: Bool
        switch (vector.expect, result) {
        case (.valid(let counter), .success(let got)):
            passed = counter == nil || counter == got
        case (.invalid(let reasons), .failure(let error)):
            passed = reasons.contains(error.code.description)
        default:
            passed = false
        }
        let got: String
        switch result {
        case .success(let counter): got = counter.map { "valid(counter \($0))" } ?? "valid"
        case .failure(let error): got = "invalid(\(error.code)): \(error.reason)"
        }
        return Outcome(id: vector.id, expected: vector.expect.description, got: got, passed: passed)
    }

    /// Verifies a vector; returns the counter to store for assertions, nil for attestations.
    private func verify(_ vector: TestVector) throws(AppAttestError) -> UInt32? {
        switch vector.kind {
        case .attestation:
            guard let object = vector.attestation, let keyID = vector.keyID, let hash = vector.clientDataHash,
                let environment = vector.environment, let date = vector.verifyAt
            else { throw AppAttestError(.malformed, "incomplete attestation vector") }
            let verifier = try AppAttestVerifier(
                configuration: .init(
                    appID: vector.appID, environment: environment, trustAnchor: file.trustAnchor,
                    verificationTime: .fixed(date)))
            // With a challenge, the library hashes it (the production entry point); without one, the vector's
            // clientDataHash is what the device was given (Apple's documentation samples passed the raw
            // challenge, TestVectors/README.md). The reader checked that the two agree when both are present.
            if let challenge = vector.challenge {
                _ = try verifier.verifyAttestation(object, keyID: keyID, challenge: challenge)
            } else {
                _ = try verifier.verifyAttestation(object, keyID: keyID, clientDataHash: hash)
            }
            return nil
        case .assertion:
            guard let object = vector.assertion, let clientData = vector.clientData, let point = vector.publicKey,
                let previous = vector.previousCounter
            else { throw AppAttestError(.malformed, "incomplete assertion vector") }
            let verifier = try AppAttestVerifier(
                configuration: .init(
                    apps: [vector.appID: Set(AppAttestEnvironment.allCases)], trustAnchor: file.trustAnchor))
            let key = try AttestedPublicKey(x963Representation: point)
            let verified = try verifier.verifyAssertion(
                object, clientData: clientData,
                key: AttestedKey(publicKey: key, appID: vector.appID, environment: .production, counter: previous))
            return verified.counter
        }
    }
}
