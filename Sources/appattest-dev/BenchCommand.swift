@_spi(FixedVerificationTime) import AppAttest
import AppAttestCommandSupport
import AppAttestCrypto
import AppAttestVectors
import ArgumentParser
import Crypto
import Foundation
import SwiftASN1
import Synchronization
import X509

#if Service
private let benchSubcommands: [any ParsableCommand.Type] = [BenchVerify.self, BenchStore.self, BenchKeys.self]
#else
private let benchSubcommands: [any ParsableCommand.Type] = [BenchVerify.self]
#endif

/// `appattest-dev bench [verify]`, and `appattest-dev bench store` and `bench keys` (with the Service trait).
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract:
            "Benchmarks: verification rates (default) and, with the Service trait, the store (`bench store`) and a key cache miss (`bench keys`).",
        subcommands: benchSubcommands,
        defaultSubcommand: BenchVerify.self
    )
}

/// `appattest-dev bench verify`: verification rates on real vectors, beside the raw P-256 rates of swift-crypto (which
/// assertions use) and OpenSSL, and OpenSSL's raw P-384 rate (which attestations use), measured in the same run, on
/// one thread or several sharing one verifier.
struct BenchVerify: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Measure attestation and assertion verifications per second, on one thread or several.",
        discussion: """
            Uses a real attestation and a real assertion from the vector file, and measures in the same run the \
            raw rates they are bounded by, on the same signatures: swift-crypto's P-256 verify (the key and the \
            signature parsed once, the digest computed beforehand), which assertions use; OpenSSL's P-256 verify \
            for comparison; and OpenSSL's P-384 verify of the credCert's signature by the intermediate's key, which \
            attestations use (one initialised EVP_PKEY_CTX, precomputed digest: what `openssl speed ecdsap256` and \
            `ecdsap384` measure). With --threads N, one shared verifier runs on N threads at \
            once and the one-thread figures are measured too, so the scaling is reported from the same run. Build \
            with `-c release` for meaningful figures.
            """
    )

    @Option(help: "Seconds to spend on each measurement.")
    var seconds: Double = 3

    @Option(help: "Vector file to take the attestation and assertion from.")
    var vectors: String = "TestVectors/real-devices.json"

    @Option(help: "Threads sharing one verifier (1–64).")
    var threads: Int = 1

    @Flag(help: "Print one JSON object.")
    var json = false

    /// One row of figures, at one thread count.
    struct Figures {
        var attestations: Double
        var assertions: Double
        var swiftCryptoP256: Double
        var opensslP256: Double
        var opensslP384: Double
        var swiftCryptoP384: Double
    }

    func run() throws {
        guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds must be in (0, 600]") }
        guard (1...64).contains(threads) else { throw ValidationError("--threads must be from 1 to 64") }
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
        let attest: @Sendable () throws -> Void = {
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
        let assert: @Sendable () throws -> Void = {
            _ = try assertionVerifier.verifyAssertion(
                assertionBytes, clientData: clientData,
                key: AttestedKey(publicKey: key, appID: appID, environment: .production, counter: previous))
        }

        // Raw OpenSSL P-256: the assertion's key and signature, digest precomputed.
        let decoded = try AssertionObject(cborEncoded: assertionBytes)
        let nonce = AppAttestSHA256.hash(decoded.authenticatorData.rawRepresentation + AppAttestSHA256.hash(clientData))
        let digest = AppAttestSHA256.hash(nonce)
        let rawKey = try P256PublicKey(x963Representation: assertion.publicKey!)
        let signature = decoded.signature
        guard RawOpenSSLBenchmark.verifyLoop(key: rawKey, signature: signature, digest: digest, iterations: 1) == 1
        else {
            throw ValidationError("the raw OpenSSL baseline does not verify the vector's signature")
        }
        let rawP256: @Sendable () throws -> Void = {
            _ = RawOpenSSLBenchmark.verifyLoop(key: rawKey, signature: signature, digest: digest, iterations: 64)
        }

        // Raw swift-crypto P-256: the same key and signature, each parsed once, SHA-256(nonce) computed beforehand.
        let swiftCryptoKey = try P256.Signing.PublicKey(x963Representation: assertion.publicKey!)
        let swiftCryptoSignature = try P256.Signing.ECDSASignature(derRepresentation: signature)
        let swiftCryptoDigest = Crypto.SHA256.hash(data: nonce)
        guard swiftCryptoKey.isValidSignature(swiftCryptoSignature, for: swiftCryptoDigest) else {
            throw ValidationError("the raw swift-crypto baseline does not verify the vector's signature")
        }
        let swiftCryptoP256: @Sendable () throws -> Void = {
            var valid = 0
            for _ in 0..<64 where swiftCryptoKey.isValidSignature(swiftCryptoSignature, for: swiftCryptoDigest) {
                valid += 1
            }
            guard valid == 64 else { throw ValidationError("swift-crypto refused a signature it had verified") }
        }

        // Raw OpenSSL P-384: the credCert's signature by the intermediate's key, digest precomputed.
        let chain = try AttestationObject(cborEncoded: object).certificateChain
        let rawP384Benchmark = try RawOpenSSLBenchmark.P384CertificateSignature(
            leafDER: chain[0], intermediateDER: chain[1])
        let rawP384: @Sendable () throws -> Void = { _ = rawP384Benchmark.run(iterations: 16) }

        // Raw swift-crypto P-384, for comparison only (the chain stays on OpenSSL): the same signature and key, the
        // digest of tbsCertificate computed beforehand.
        let leafCertificate = try Certificate(derEncoded: chain[0])
        guard
            let intermediateKey = P384.Signing.PublicKey(try Certificate(derEncoded: chain[1]).publicKey),
            case .constructed(let nodes) = try DER.parse(chain[0]).content, case let parts = Array(nodes),
            parts.count == 3
        else { throw ValidationError("the credCert is not signed by a P-384 key") }
        let leafSignature = try P384.Signing.ECDSASignature(
            derRepresentation: try ASN1BitString(derEncoded: parts[2]).bytes)
        // The credCert is signed ECDSA with SHA-256, by the intermediate's P-384 key.
        let leafDigest = Crypto.SHA256.hash(data: leafCertificate.tbsCertificateBytes)
        guard intermediateKey.isValidSignature(leafSignature, for: leafDigest) else {
            throw ValidationError("swift-crypto does not verify the credCert's signature")
        }
        let swiftCryptoP384: @Sendable () throws -> Void = {
            for _ in 0..<16 { _ = intermediateKey.isValidSignature(leafSignature, for: leafDigest) }
        }

        // Interleaved: every measurement runs in slices of 250 ms, taking turns with the others (and the one-thread
        // figures with the N-thread ones), so that a machine whose speed drifts (frequency, other tenants) affects
        // the figures of a ratio alike.
        let workloads: [(batch: Int, body: @Sendable () throws -> Void)] = [
            (1, attest), (1, assert), (64, swiftCryptoP256), (64, rawP256), (16, rawP384), (16, swiftCryptoP384),
        ]
        let threadCounts = threads > 1 ? [1, threads] : [1]
        var totals = [[(count: Int, seconds: Double)]](
            repeating: [(count: Int, seconds: Double)](repeating: (0, 0), count: workloads.count),
            count: threadCounts.count)
        for count in threadCounts {
            for workload in workloads {
                _ = try measure(0.2, threads: count, batch: workload.batch, workload.body)  // warm-up
            }
        }
        let slice = 0.25
        for _ in 0..<max(1, Int((seconds / slice).rounded())) {
            for (row, count) in threadCounts.enumerated() {
                for (column, workload) in workloads.enumerated() {
                    let part = try measureCount(slice, threads: count, batch: workload.batch, workload.body)
                    totals[row][column].count += part.count
                    totals[row][column].seconds += part.seconds
                }
            }
        }
        func figures(_ row: Int) -> Figures {
            let rates = totals[row].map { Double($0.count) / $0.seconds }
            return Figures(
                attestations: rates[0], assertions: rates[1], swiftCryptoP256: rates[2], opensslP256: rates[3],
                opensslP384: rates[4], swiftCryptoP384: rates[5])
        }
        let one = figures(0)
        let many = threads > 1 ? figures(1) : nil

        func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
        if json {
            var report: [String: Any] = [
                "threads": threads,
                "attestationsPerSecond": one.attestations.rounded(),
                "assertionsPerSecond": one.assertions.rounded(),
                "swiftCryptoP256VerifiesPerSecond": one.swiftCryptoP256.rounded(),
                "opensslP256VerifiesPerSecond": one.opensslP256.rounded(),
                "opensslP384VerifiesPerSecond": one.opensslP384.rounded(),
                "swiftCryptoP384VerifiesPerSecond": one.swiftCryptoP384.rounded(),
                "assertionToSwiftCryptoRatio": rounded(one.assertions / one.swiftCryptoP256),
                "assertionToOpenSSLRatio": rounded(one.assertions / one.opensslP256),
                "attestationToOpenSSLP384Ratio": rounded(one.attestations / one.opensslP384),
                "secondsPerMeasurement": seconds,
                "attestationVector": attestation.id,
                "assertionVector": assertion.id,
            ]
            if let many {
                report["multiThread"] = [
                    "threads": threads,
                    "attestationsPerSecond": many.attestations.rounded(),
                    "assertionsPerSecond": many.assertions.rounded(),
                    "swiftCryptoP256VerifiesPerSecond": many.swiftCryptoP256.rounded(),
                    "opensslP256VerifiesPerSecond": many.opensslP256.rounded(),
                    "opensslP384VerifiesPerSecond": many.opensslP384.rounded(),
                    "swiftCryptoP256Scaling": rounded(many.swiftCryptoP256 / one.swiftCryptoP256),
                    "attestationScaling": rounded(many.attestations / one.attestations),
                    "assertionScaling": rounded(many.assertions / one.assertions),
                ]
            }
            let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        } else {
            print("one thread")
            print("attestation  \(attestation.id): \(Int(one.attestations.rounded()))/s")
            print("assertion    \(assertion.id): \(Int(one.assertions.rounded()))/s (parsed key reused)")
            print("swift-crypto raw P-256 verify: \(Int(one.swiftCryptoP256.rounded()))/s")
            print("openssl      raw P-256 verify: \(Int(one.opensslP256.rounded()))/s")
            print("openssl      raw P-384 verify: \(Int(one.opensslP384.rounded()))/s")
            print("swift-crypto raw P-384 verify: \(Int(one.swiftCryptoP384.rounded()))/s (comparison only)")
            print(
                "ratio        assertion / swift-crypto raw P-256: \(String(format: "%.3f", one.assertions / one.swiftCryptoP256))"
            )
            print(
                "ratio        assertion / OpenSSL raw P-256: \(String(format: "%.3f", one.assertions / one.opensslP256))"
            )
            print("ratio        attestation / raw P-384: \(String(format: "%.3f", one.attestations / one.opensslP384))")
            if let many {
                print("\(threads) threads, one shared verifier")
                print(
                    "attestation  \(Int(many.attestations.rounded()))/s (\(String(format: "%.2f", many.attestations / one.attestations))×)"
                )
                print(
                    "assertion    \(Int(many.assertions.rounded()))/s (\(String(format: "%.2f", many.assertions / one.assertions))×)"
                )
                print(
                    "swift-crypto raw P-256 \(Int(many.swiftCryptoP256.rounded()))/s (\(String(format: "%.2f", many.swiftCryptoP256 / one.swiftCryptoP256))×)"
                )
                print(
                    "openssl      raw P-256 \(Int(many.opensslP256.rounded()))/s, raw P-384 \(Int(many.opensslP384.rounded()))/s"
                )
            }
        }
    }

    /// Calls `body` repeatedly on `threads` threads at once for `seconds`; returns calls (× batch) per second, all
    /// threads together.
    private func measure(
        _ seconds: Double, threads: Int, batch: Int = 1, _ body: @escaping @Sendable () throws -> Void
    ) throws -> Double {
        let part = try measureCount(seconds, threads: threads, batch: batch, body)
        return Double(part.count) / part.seconds
    }

    /// Calls `body` repeatedly on `threads` threads at once for `seconds`; returns the calls (× batch), all threads
    /// together, and the longest thread's time.
    private func measureCount(
        _ seconds: Double, threads: Int, batch: Int = 1, _ body: @escaping @Sendable () throws -> Void
    ) throws -> (count: Int, seconds: Double) {
        let results = Mutex<[Result<(count: Int, seconds: Double), any Error>]>([])
        let start = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for _ in 0..<threads {
            done.enter()
            let thread = Thread {
                start.wait()
                let result = Result { try Self.loop(seconds, body) }
                results.withLock { $0.append(result) }
                done.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        for _ in 0..<threads { start.signal() }
        done.wait()
        var count = 0
        var longest = 0.0
        for result in results.withLock({ $0 }) {
            let (calls, elapsed) = try result.get()
            count += calls
            longest = max(longest, elapsed)
        }
        return (count * batch, longest)
    }

    /// One thread's loop: calls in groups of 16 until `seconds` have passed.
    private static func loop(_ seconds: Double, _ body: () throws -> Void) throws -> (count: Int, seconds: Double) {
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = start.advanced(by: .milliseconds(Int64(seconds * 1000)))
        var count = 0
        while true {
            for _ in 0..<16 { try body() }
            count += 16
            if clock.now >= deadline { break }
        }
        let elapsed = start.duration(to: clock.now)
        return (count, elapsed / .seconds(1))
    }
}
