import AppAttest
import AppAttestCrypto
import AppAttestVectors
import ArgumentParser
import Foundation

#if Service
private let benchSubcommands: [any ParsableCommand.Type] = [BenchVerify.self, BenchStore.self]
#else
private let benchSubcommands: [any ParsableCommand.Type] = [BenchVerify.self]
#endif

/// `appattest bench [verify]` and `appattest bench store` (with the Service trait).
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Benchmarks: verification rates (default) and, with the Service trait, the store (`bench store`).",
        subcommands: benchSubcommands,
        defaultSubcommand: BenchVerify.self
    )
}

/// `appattest bench verify`: single-thread verification rates on real vectors, beside OpenSSL's raw P-256 rate.
struct BenchVerify: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Measure attestation and assertion verifications per second on one thread.",
        discussion: """
            Uses a real attestation and a real assertion from the vector file, and measures in the same run the \
            raw OpenSSL P-256 verify rate (one initialised EVP_PKEY_CTX, precomputed digest: what `openssl speed \
            ecdsap256` measures). Build with `-c release` for meaningful figures.
            """
    )

    @Option(help: "Seconds to spend on each measurement.")
    var seconds: Double = 3

    @Option(help: "Vector file to take the attestation and assertion from.")
    var vectors: String = "TestVectors/real-devices.json"

    @Flag(help: "Print one JSON object.")
    var json = false

    func run() throws {
        guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds must be in (0, 600]") }
        let file = try TestVectorFile(jsonData: try readInput(vectors, limit: TestVectorFile.maximumFileSize))
        let all = file.entries.compactMap { entry -> TestVector? in
            if case .vector(let vector) = entry { return vector }
            return nil
        }
        guard
            let attestation = all.first(where: {
                $0.kind == .attestation && $0.expect == .valid(counter: nil) && $0.challenge != nil
            }),
            let assertion = all.first(where: {
                $0.kind == .assertion && { if case .valid = $0.expect { true } else { false } }($0)
            })
        else { throw ValidationError("\(vectors) has no valid attestation with a challenge and no valid assertion") }

        // Attestation: one shared verifier, as a server would hold it.
        let attestationVerifier = try AppAttestVerifier(
            configuration: .init(
                appID: attestation.appID, environment: attestation.environment!, trustAnchor: file.trustAnchor,
                verificationTime: .fixed(attestation.verifyAt!)))
        let object = attestation.attestation!, keyID = attestation.keyID!, challenge = attestation.challenge!
        let attestationsPerSecond = try measure(seconds) {
            _ = try attestationVerifier.verifyAttestation(object, keyID: keyID, challenge: challenge)
        }

        // Assertion: the parsed key reused.
        let assertionVerifier = try AppAttestVerifier(
            configuration: .init(
                apps: [assertion.appID: Set(AppAttestEnvironment.allCases)], trustAnchor: file.trustAnchor))
        let key = try AttestedPublicKey(x963Representation: assertion.publicKey!)
        let assertionBytes = assertion.assertion!, clientData = assertion.clientData!
        let previous = assertion.previousCounter!
        let appID = assertion.appID
        let assertionsPerSecond = try measure(seconds) {
            _ = try assertionVerifier.verifyAssertion(
                assertionBytes, clientData: clientData, publicKey: key, appID: appID, previousCounter: previous)
        }

        // Raw OpenSSL: the same key and signature, digest precomputed.
        let decoded = try AssertionObject(cborEncoded: assertionBytes)
        let nonce = AppAttestSHA256.hash(decoded.authenticatorData.rawRepresentation + AppAttestSHA256.hash(clientData))
        let digest = AppAttestSHA256.hash(nonce)
        let rawKey = try P256PublicKey(x963Representation: assertion.publicKey!)
        guard
            RawOpenSSLBenchmark.verifyLoop(key: rawKey, signature: decoded.signature, digest: digest, iterations: 1)
                == 1
        else {
            throw ValidationError("the raw OpenSSL baseline does not verify the vector's signature")
        }
        let opensslPerSecond = try measure(seconds, batch: 64) {
            _ = RawOpenSSLBenchmark.verifyLoop(
                key: rawKey, signature: decoded.signature, digest: digest, iterations: 64)
        }
        let ratio = assertionsPerSecond / opensslPerSecond

        if json {
            let report: [String: Any] = [
                "attestationsPerSecond": attestationsPerSecond.rounded(),
                "assertionsPerSecond": assertionsPerSecond.rounded(),
                "opensslP256VerifiesPerSecond": opensslPerSecond.rounded(),
                "assertionToOpenSSLRatio": (ratio * 1000).rounded() / 1000,
                "secondsPerMeasurement": seconds,
                "attestationVector": attestation.id,
                "assertionVector": assertion.id,
            ]
            let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        } else {
            print("attestation  \(attestation.id): \(Int(attestationsPerSecond.rounded()))/s")
            print("assertion    \(assertion.id): \(Int(assertionsPerSecond.rounded()))/s (parsed key reused)")
            print("openssl      raw P-256 verify: \(Int(opensslPerSecond.rounded()))/s")
            print("ratio        assertion / raw OpenSSL: \(String(format: "%.3f", ratio))")
        }
    }

    /// Calls `body` repeatedly for `seconds` after a short warm-up; returns calls (× batch) per second.
    private func measure(_ seconds: Double, batch: Int = 1, _ body: () throws -> Void) throws -> Double {
        let clock = ContinuousClock()
        let warmUp = clock.now.advanced(by: .milliseconds(200))
        while clock.now < warmUp { try body() }
        let start = clock.now
        let deadline = start.advanced(by: .milliseconds(Int64(seconds * 1000)))
        var count = 0
        while true {
            for _ in 0..<16 { try body() }
            count += 16
            if clock.now >= deadline { break }
        }
        let elapsed = start.duration(to: clock.now)
        let secondsElapsed = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Double(count * batch) / secondsElapsed
    }
}
