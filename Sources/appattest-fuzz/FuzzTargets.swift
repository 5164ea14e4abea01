@_spi(FixedVerificationTime) import AppAttest
import AppAttestCBOR
import Foundation

/// The fuzzed entry points. Each takes hostile bytes and must return (valid or a typed error), never crash,
/// hang or allocate without bound.
enum FuzzTarget: String, CaseIterable {
    case cbor, authdata, attestation, assertion

    /// Fixed inputs shared by every run: a verifier trusting Apple's root at the time of a real vector (so that
    /// the chain code runs on real certificates), and a real attested key.
    static let appID = try! AppID("6MURL8TA57.de.vincent-haupert.apple-appattest-poc")
    static let verifier = try! AppAttestVerifier(
        configuration: .init(
            apps: [appID: [.development, .production]],
            verificationTime: .fixed(Date(timeIntervalSince1970: 1_606_038_492))))
    static let key = try! AttestedPublicKey(
        x963Representation: Array(
            Data(
                base64Encoded:
                    "BGR4sZdcDYd1d1gI+eWJ5WvjRpI693MLELBVNM2P6w3j3y5m38Fxa6UUxnReNV1AASPCCHv3wJRtxYWCZTQE49c=")!))

    func run(_ bytes: [UInt8]) {
        switch self {
        case .cbor:
            _ = try? CBORDecoder().decode(bytes)
            if !bytes.isEmpty {
                _ = try? CBORDecoder(maximumInputSize: 4096, maximumDepth: 4).decodePrefix(bytes, from: 0)
            }
        case .authdata:
            _ = try? AuthenticatorData(attestationRepresentation: bytes)
            _ = try? AuthenticatorData(assertionRepresentation: bytes)
        case .attestation:
            // The first 32 bytes pick the keyId, the rest is the object, so that keyId checks can pass too.
            let keyID = try! KeyID(
                rawValue: bytes.count >= 32 ? Array(bytes.prefix(32)) : [UInt8](repeating: 0, count: 32))
            let object = Array(bytes.dropFirst(32))
            _ = try? Self.verifier.verifyAttestation(
                object, keyID: keyID, clientDataHash: [UInt8](repeating: 0, count: 32))
            _ = try? AttestationObject(cborEncoded: bytes)
        case .assertion:
            _ = try? Self.verifier.verifyAssertion(
                bytes, clientData: [1, 2, 3],
                key: AttestedKey(publicKey: Self.key, appID: Self.appID, environment: .production, counter: 0))
        }
    }
}
