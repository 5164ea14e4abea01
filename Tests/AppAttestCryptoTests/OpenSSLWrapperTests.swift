import AppAttestCrypto
import Crypto
import Foundation
import Testing

/// The OpenSSL wrapper's primitives, each held to an independent implementation (swift-crypto) on the same inputs.
@Suite("OpenSSL wrapper: P-256 keys and signatures, SHA-256, constant-time comparison")
struct OpenSSLWrapperTests {
    @Test("a signature made by swift-crypto verifies; a changed message, digest or signature does not")
    func p256AgreesWithSwiftCrypto() throws {
        let signer = P256.Signing.PrivateKey()
        let message = Array("the client data".utf8)
        let signature = Array(try signer.signature(for: message).derRepresentation)
        let point = Array(signer.publicKey.x963Representation)
        let parsed = try P256PublicKey(x963Representation: point)
        let checked = try #require(P256PublicKey(checkedPoint: point))
        for key in [parsed, checked] {
            #expect(key.isValidSignature(derEncoded: signature, message: message))
            #expect(key.isValidSignature(derEncoded: signature, sha256Digest: Array(SHA256.hash(data: message))))
            #expect(!key.isValidSignature(derEncoded: signature, message: message + [0]))
            #expect(!key.isValidSignature(derEncoded: signature, sha256Digest: [UInt8](repeating: 0, count: 32)))
            #expect(!key.isValidSignature(derEncoded: signature, sha256Digest: [UInt8](repeating: 0, count: 31)))
            var flipped = signature
            flipped[flipped.count - 1] ^= 1
            #expect(!key.isValidSignature(derEncoded: flipped, message: message))
            #expect(!key.isValidSignature(derEncoded: [], message: message))
        }
        #expect(parsed.x963Representation == point)
    }

    @Test("a signature that is not strict DER is refused: a trailing byte, a long-form length")
    func strictDER() throws {
        let signer = P256.Signing.PrivateKey()
        let message = Array("strict".utf8)
        let signature = Array(try signer.signature(for: message).derRepresentation)
        let key = try P256PublicKey(x963Representation: Array(signer.publicKey.x963Representation))
        #expect(!key.isValidSignature(derEncoded: signature + [0], message: message))
        // 30 len … → 30 81 len …: the same content, a non-minimal length.
        let longForm = [0x30, 0x81, signature[1]] + signature.dropFirst(2)
        #expect(!key.isValidSignature(derEncoded: Array(longForm), message: message))
    }

    @Test("a point off the curve, compressed or of the wrong size is refused")
    func invalidPoints() throws {
        var point = Array(P256.Signing.PrivateKey().publicKey.x963Representation)
        point[64] ^= 1
        #expect(throws: OpenSSLError.self) { try P256PublicKey(x963Representation: point) }
        #expect(P256PublicKey(checkedPoint: point) == nil)
        let compressed = Array(P256.Signing.PrivateKey().publicKey.compressedRepresentation)
        #expect(P256PublicKey(checkedPoint: compressed) == nil)
        #expect(P256PublicKey(checkedPoint: []) == nil)
        #expect(P256PublicKey(checkedPoint: [UInt8](repeating: 4, count: 65)) == nil)
    }

    @Test("SHA-256 agrees with swift-crypto, whole and in two parts")
    func sha256() {
        for size in [0, 1, 55, 56, 64, 1000] {
            let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let expected = Array(Crypto.SHA256.hash(data: bytes))
            #expect(AppAttestCrypto.SHA256.hash(bytes) == expected)
            let half = bytes.count / 2
            #expect(AppAttestCrypto.SHA256.hash(Array(bytes[..<half]), Array(bytes[half...])) == expected)
        }
    }

    @Test("constant-time comparison: equal, different, different lengths, empty")
    func constantTime() {
        #expect(constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2]))
        #expect(constantTimeEquals([], []))
    }
}
