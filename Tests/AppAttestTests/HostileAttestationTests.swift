import AppAttest
import AppAttestCBOR
import AppAttestVectors
import Foundation
import Testing

/// Every input from outside is hostile: truncated, oversized, deep, wrong types, huge declared
/// lengths. Each must be a typed `malformed` error, never a crash, a hang or a large allocation.
@Suite("Hostile attestation objects")
struct HostileAttestationTests {
    let vector = realVector("veehaitch-2020-11-21-6MURL8TA57")
    var verifier: AppAttestVerifier { try! makeVerifier(for: vector) }

    func verify(_ bytes: [UInt8]) throws {
        _ = try verifier.verifyAttestation(bytes, keyID: vector.keyID!, challenge: vector.challenge!)
    }

    var entries: [CBORMapEntry] {
        guard case .map(let entries) = try! CBORDecoder().decode(vector.attestation!) else { fatalError() }
        return entries
    }

    func replacing(_ key: String, with value: CBORValue?) -> [UInt8] {
        var copy = entries
        if let index = copy.firstIndex(where: { $0.key == .textString(key) }) {
            if let value { copy[index].value = value } else { copy.remove(at: index) }
        }
        return CBORWriter.encode(.map(copy))
    }

    var authData: [UInt8] {
        guard case .byteString(let bytes)? = entries.first(where: { $0.key == .textString("authData") })?.value else {
            fatalError()
        }
        return bytes
    }

    @Test("the re-encoded object is still valid, so each mutation below tests one thing")
    func reencodingIsFaithful() throws {
        #expect(CBORWriter.encode(.map(entries)) == vector.attestation!)
        try verify(CBORWriter.encode(.map(entries)))
    }

    @Test("structural mutations are malformed")
    func structure() {
        let statement = entries.first { $0.key == .textString("attStmt") }!.value
        guard case .map(let statementEntries) = statement else { fatalError() }
        let cases: [(String, [UInt8])] = [
            ("empty input", []),
            ("a CBOR integer", [0x01]),
            ("an empty map", [0xA0]),
            ("fmt missing", replacing("fmt", with: nil)),
            ("fmt as bytes", replacing("fmt", with: .byteString(Array("apple-appattest".utf8)))),
            ("fmt packed", replacing("fmt", with: .textString("packed"))),
            ("attStmt as array", replacing("attStmt", with: .array([]))),
            (
                "attStmt without receipt",
                replacing("attStmt", with: .map(statementEntries.filter { $0.key != .textString("receipt") }))
            ),
            (
                "attStmt with an extra key",
                replacing(
                    "attStmt",
                    with: .map(statementEntries + [CBORMapEntry(key: .textString("alg"), value: .negativeInteger(6))]))
            ),
            (
                "x5c as bytes",
                replacing(
                    "attStmt",
                    with: .map(
                        statementEntries.map {
                            $0.key == .textString("x5c") ? CBORMapEntry(key: $0.key, value: .byteString([1])) : $0
                        }))
            ),
            (
                "x5c empty",
                replacing(
                    "attStmt",
                    with: .map(
                        statementEntries.map {
                            $0.key == .textString("x5c") ? CBORMapEntry(key: $0.key, value: .array([])) : $0
                        }))
            ),
            (
                "x5c with a text element",
                replacing(
                    "attStmt",
                    with: .map(
                        statementEntries.map {
                            $0.key == .textString("x5c")
                                ? CBORMapEntry(key: $0.key, value: .array([.textString("x")])) : $0
                        }))
            ),
            (
                "x5c with five certificates",
                replacing(
                    "attStmt",
                    with: .map(
                        statementEntries.map {
                            $0.key == .textString("x5c")
                                ? CBORMapEntry(
                                    key: $0.key, value: .array(Array(repeating: .byteString([0x30, 0x00]), count: 5)))
                                : $0
                        }))
            ),
            (
                "receipt as text",
                replacing(
                    "attStmt",
                    with: .map(
                        statementEntries.map {
                            $0.key == .textString("receipt") ? CBORMapEntry(key: $0.key, value: .textString("r")) : $0
                        }))
            ),
            ("authData missing", replacing("authData", with: nil)),
            ("authData as text", replacing("authData", with: .textString("x"))),
            ("authData of 54 bytes", replacing("authData", with: .byteString(Array(authData.prefix(54))))),
            ("authData without COSE key", replacing("authData", with: .byteString(Array(authData.prefix(55 + 32))))),
            (
                "credentialIdLength 0xFFFF",
                replacing(
                    "authData", with: .byteString(Array(authData.prefix(53)) + [0xFF, 0xFF] + authData.dropFirst(55)))
            ),
            (
                "credentialIdLength past the end",
                replacing(
                    "authData", with: .byteString(Array(authData.prefix(53)) + [0x00, 0xA0] + authData.dropFirst(55)))
            ),
            ("authData with a trailing byte", replacing("authData", with: .byteString(authData + [0x00]))),
            ("authData with a trailing array", replacing("authData", with: .byteString(authData + [0x80]))),
            ("authData with two extension maps", replacing("authData", with: .byteString(authData + [0xA0, 0xA0]))),
            (
                "authData with a truncated extension map",
                replacing("authData", with: .byteString(authData + [0xA1, 0x61]))
            ),
            (
                "an extra top-level key",
                CBORWriter.encode(.map(entries + [CBORMapEntry(key: .textString("x"), value: .null)]))
            ),
            ("a duplicated top-level key", CBORWriter.encode(.map(entries.dropLast() + [entries[0]]))),
            ("a trailing byte", vector.attestation! + [0x00]),
            ("an indefinite-length map", [0xBF] + Array(vector.attestation!.dropFirst()) + [0xFF]),
            ("oversized", [UInt8](repeating: 0x00, count: AttestationObject.maximumSize + 1)),
            ("100 nested arrays", [UInt8](repeating: 0x81, count: 100) + [0x00]),
            ("a map declaring 2^32-1 pairs", [0xBA, 0xFF, 0xFF, 0xFF, 0xFF, 0x63, 0x66, 0x6D, 0x74]),
            (
                "a byte string declaring 2^64-1 bytes",
                [0xA1, 0x63, 0x66, 0x6D, 0x74, 0x5B] + [UInt8](repeating: 0xFF, count: 8)
            ),
        ]
        for (name, bytes) in cases {
            expectCode(.malformed, name) { try verify(bytes) }
        }
    }

    @Test("a COSE key of another type is unsupported; a different P-256 key breaks the nonce first")
    func coseKeys() throws {
        // Changing authData changes the nonce, which is checked first (“Verifying attestations”), so the COSE checks
        // themselves are reached with simulated devices (AppAttestTesting); here only the parser's view.
        let data = try AuthenticatorData(attestationRepresentation: authData)
        #expect(data.attestedCredentialData?.credentialPublicKeyPoint?.count == 65)
        var rsa = authData
        // kty 2 → 3 (RSA): the map's second byte after `A5 01`.
        let index = 55 + 32 + 2
        #expect(rsa[index - 1] == 0x01 && rsa[index] == 0x02)
        rsa[index] = 0x03
        #expect(
            try AuthenticatorData(attestationRepresentation: rsa).attestedCredentialData?.credentialPublicKeyPoint
                == nil)
    }

    @Test("every proper prefix of a real attestation object is malformed")
    func prefixes() {
        let bytes = vector.attestation!
        for length in 0..<bytes.count {
            expectCode(.malformed, "prefix \(length)") { try verify(Array(bytes.prefix(length))) }
        }
    }

    @Test("flipping any single byte never crashes and gives a typed error", arguments: [0, 1, 2, 3])
    func byteFlips(_ seed: Int) {
        // A quarter of all positions per argument; each flip is a typed rejection (or, for bytes that no
        // check covers, such as unused bits of the receipt, acceptance).
        var rejected = 0
        let bytes = vector.attestation!
        for position in stride(from: seed, to: bytes.count, by: 4) {
            var mutated = bytes
            mutated[position] ^= 0x5A
            do { try verify(mutated) } catch is AppAttestError { rejected += 1 } catch {
                Issue.record("position \(position): untyped error \(error)")
            }
        }
        #expect(rejected > 0)
    }
}
