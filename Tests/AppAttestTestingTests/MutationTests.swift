@_spi(FixedVerificationTime) import AppAttest
import AppAttestCBOR
import AppAttestTesting
import Foundation
import Testing

/// Property: for any mutation of a valid object, by byte or by structure, verification either succeeds on the same
/// signed content or fails with a typed error; it never crashes, hangs or allocates without bound. The verifier's
/// errors are typed by construction (`throws(AppAttestError)`), so the loops check what types cannot: that nothing
/// different from the original is ever accepted, and that memory stays bounded. 114,000 mutations in all.
@Suite("Mutation properties", .serialized)
struct MutationTests {
    static let authority = try! TestCertificateAuthority(name: "Mutation")
    static let appID = try! AppID("MUTAT12345.com.example.mutation")
    static let now = Date(timeIntervalSince1970: 1_780_000_000)
    static let device = try! SimulatedDevice(authority: authority, appID: appID, counter: 41)
    static let verifier = try! AppAttestVerifier(
        configuration: .init(
            apps: [appID: [.production, .development]], trustAnchor: authority.trustAnchor,
            verificationTime: .fixed(now)))
    static let extensions = AuthenticatorExtensions(bundleVersion: "12", validationCategoryBytes: [1, 0, 0, 0])
    static let challenge = Array("mutation challenge".utf8)
    static let clientData = Array("{\"challenge\":\"abc\"}".utf8)

    static let attestation: [UInt8] = {
        var options = SimulatedDevice.AttestationOptions()
        options.issuedAt = now
        options.extensions = extensions
        return try! device.attest(challenge: challenge, options)
    }()

    static let assertion: [UInt8] = {
        var options = SimulatedDevice.AssertionOptions()
        options.extensions = extensions
        options.counter = 42
        return try! device.assert(clientData: clientData, options)
    }()

    static let key = try! AttestedPublicKey(x963Representation: device.publicKey)

    @Test("the base objects verify")
    func baseObjects() throws {
        _ = try Self.verifier.verifyAttestation(Self.attestation, keyID: Self.device.keyID, challenge: Self.challenge)
        _ = try Self.verifier.verifyAssertion(
            Self.assertion, clientData: Self.clientData,
            key: AttestedKey(publicKey: Self.key, appID: Self.appID, environment: .production, counter: 41))
    }

    @Test("90,000 assertion mutations: nothing different is accepted, memory stays bounded", arguments: 0..<6)
    func assertions(seed: UInt64) throws {
        let original = try AssertionObject(cborEncoded: Self.assertion)
        var random = SplitMix64(seed: seed)
        let before = residentMegabytes()
        for round in 0..<15_000 {
            let mutated = round % 4 == 3 ? structural(Self.assertion, &random) : bytewise(Self.assertion, &random)
            do {
                let result = try Self.verifier.verifyAssertion(
                    mutated, clientData: Self.clientData,
                    key: AttestedKey(publicKey: Self.key, appID: Self.appID, environment: .production, counter: 41))
                let accepted = try AssertionObject(cborEncoded: mutated)
                #expect(
                    accepted.signature == original.signature, "seed \(seed) round \(round): accepted another signature")
                #expect(accepted.authenticatorData == original.authenticatorData, "seed \(seed) round \(round)")
                #expect(result.counter == 42)
            } catch {
                #expect(error.code != .internalCryptoFailure, "seed \(seed) round \(round): \(error)")
            }
        }
        #expect(residentMegabytes() - before < 256, "seed \(seed): memory grew")
    }

    @Test("24,000 attestation mutations: nothing different is accepted, memory stays bounded", arguments: 0..<4)
    func attestations(seed: UInt64) throws {
        let original = try AttestationObject(cborEncoded: Self.attestation)
        var random = SplitMix64(seed: 1000 + seed)
        var codes: [AppAttestError.Code: Int] = [:]
        let before = residentMegabytes()
        for round in 0..<6_000 {
            let mutated = round % 4 == 3 ? structural(Self.attestation, &random) : bytewise(Self.attestation, &random)
            do {
                _ = try Self.verifier.verifyAttestation(mutated, keyID: Self.device.keyID, challenge: Self.challenge)
                let accepted = try AttestationObject(cborEncoded: mutated)
                #expect(accepted.authenticatorData == original.authenticatorData, "seed \(seed) round \(round)")
                #expect(accepted.certificateChain == original.certificateChain, "seed \(seed) round \(round)")
            } catch {
                codes[error.code, default: 0] += 1
            }
        }
        // Input can never make OpenSSL fail "internally": every rejection names what is wrong with the input.
        #expect(codes[.internalCryptoFailure] == nil, "seed \(seed): \(codes)")
        #expect(codes[.certificateChain, default: 0] > 0 && codes[.malformed, default: 0] > 0, "seed \(seed): \(codes)")
        #expect(residentMegabytes() - before < 256, "seed \(seed): memory grew")
    }

    // MARK: Mutators

    /// One to four byte-level edits: flip a bit, set a byte, insert, delete, duplicate a run, truncate, or write
    /// an extreme length head (0x1B/0x5B/0x9B/0xBB followed by 0xFF…).
    func bytewise(_ input: [UInt8], _ random: inout SplitMix64) -> [UInt8] {
        var bytes = input
        for _ in 0...random.next(below: 4) {
            guard !bytes.isEmpty else { break }
            let at = random.next(below: bytes.count)
            switch random.next(below: 7) {
            case 0: bytes[at] ^= UInt8(1 << random.next(below: 8))
            case 1: bytes[at] = UInt8(truncatingIfNeeded: random.next())
            case 2: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: at)
            case 3: bytes.remove(at: at)
            case 4:
                let length = min(random.next(below: 64) + 1, bytes.count - at)
                bytes.insert(contentsOf: bytes[at..<(at + length)], at: at)
            case 5: bytes = Array(bytes.prefix(at))
            default:
                let heads: [UInt8] = [0x1B, 0x5B, 0x7B, 0x9B, 0xBB, 0x5A, 0x9A, 0xBA]
                bytes[at] = heads[random.next(below: heads.count)]
                for offset in 1...4 where at + offset < bytes.count { bytes[at + offset] = 0xFF }
            }
        }
        return bytes
    }

    /// A change to the decoded tree, re-encoded: drop, duplicate or retype an entry, replace a byte string,
    /// nest deeper, or change an integer.
    func structural(_ input: [UInt8], _ random: inout SplitMix64) -> [UInt8] {
        guard let root = try? CBORDecoder().decode(input) else { return input }
        var mutated = mutate(root, depth: 0, &random)
        if random.next(below: 8) == 0 { mutated = .array([mutated]) }
        return CBOREncoder.encode(mutated)
    }

    func mutate(_ value: CBORValue, depth: Int, _ random: inout SplitMix64) -> CBORValue {
        switch value {
        case .map(var entries) where !entries.isEmpty:
            let index = random.next(below: entries.count)
            switch random.next(below: 5) {
            case 0: entries.remove(at: index)
            case 1: entries.append(entries[index])
            case 2: entries[index].value = replacement(for: entries[index].value, &random)
            case 3: entries[index].key = .textString("k\(random.next(below: 10))")
            default: entries[index].value = mutate(entries[index].value, depth: depth + 1, &random)
            }
            return .map(entries)
        case .array(var items) where !items.isEmpty:
            let index = random.next(below: items.count)
            switch random.next(below: 4) {
            case 0: items.remove(at: index)
            case 1: items.append(items[index])
            case 2: items.swapAt(index, random.next(below: items.count))
            default: items[index] = mutate(items[index], depth: depth + 1, &random)
            }
            return .array(items)
        case .byteString(let bytes) where random.next(below: 3) != 0 && !bytes.isEmpty:
            // Inside byte strings lie authData, certificates and signatures: mutate their bytes, keeping the CBOR.
            var copy = bytes
            let at = random.next(below: copy.count)
            copy[at] ^= UInt8(1 << random.next(below: 8))
            return .byteString(random.next(below: 4) == 0 ? Array(copy.prefix(at)) : copy)
        default:
            return replacement(for: value, &random)
        }
    }

    func replacement(for value: CBORValue, _ random: inout SplitMix64) -> CBORValue {
        switch random.next(below: 8) {
        case 0: return .null
        case 1: return .unsignedInteger(random.next())
        case 2: return .negativeInteger(UInt64(random.next(below: 100)))
        case 3: return .textString("apple-appattest")
        case 4: return .byteString([UInt8](repeating: 0, count: random.next(below: 80)))
        case 5: return .array([value])
        case 6: return .map([CBORMapEntry(key: .textString("x5c"), value: value)])
        default: return .tagged(24, value)
        }
    }
}

/// The process's resident set size in MiB (Linux), 0 elsewhere.
func residentMegabytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
    else { return 0 }
    let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
    return kilobytes / 1024
}
