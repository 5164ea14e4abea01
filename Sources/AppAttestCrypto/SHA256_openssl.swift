internal import CAppAttestOpenSSL

/// SHA-256 through OpenSSL, with the algorithm fetched once (CONTRIBUTING.md, “OpenSSL and libcbor”: OpenSSL 3 fetches
/// on every implicit use).
package enum SHA256 {
    /// The fetched `EVP_MD`; immutable after creation and safe to share between threads.
    private final class Algorithm: @unchecked Sendable {
        let md: OpaquePointer
        init() {
            guard let md = EVP_MD_fetch(nil, "SHA256", nil) else {
                fatalError("OpenSSL has no SHA-256 implementation: the library is unusable")
            }
            self.md = md
        }
    }
    private static let algorithm = Algorithm()

    package static let byteCount = 32

    /// The SHA-256 digest of `bytes`.
    package static func hash(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: 32) { out, count in
            var length: UInt32 = 0
            let ok = EVP_Digest(bytes.baseAddress, bytes.count, out.baseAddress, &length, algorithm.md, nil)
            // EVP_Digest on an in-memory buffer with a fetched SHA-256 cannot fail short of memory exhaustion.
            precondition(ok == 1 && length == 32, "EVP_Digest(SHA-256) failed")
            count = 32
        }
    }

    /// The SHA-256 digest of `bytes`.
    package static func hash<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> [UInt8] {
        if let digest = bytes.withContiguousStorageIfAvailable({ hash(UnsafeRawBufferPointer($0)) }) {
            return digest
        }
        return Array(bytes).withUnsafeBytes { hash($0) }
    }

    /// The SHA-256 digest of `first ‖ second`, without the caller building the concatenation.
    package static func hash(_ first: [UInt8], _ second: [UInt8]) -> [UInt8] {
        var joined = [UInt8]()
        joined.reserveCapacity(first.count + second.count)
        joined.append(contentsOf: first)
        joined.append(contentsOf: second)
        return joined.withUnsafeBytes { hash($0) }
    }
}

/// SHA-256 and SHA-384 for certificate signatures, each fetched once.
enum CertificateDigest {
    private final class Algorithms: @unchecked Sendable {
        let sha256: OpaquePointer
        let sha384: OpaquePointer
        init() {
            guard let sha256 = EVP_MD_fetch(nil, "SHA256", nil), let sha384 = EVP_MD_fetch(nil, "SHA384", nil) else {
                fatalError("OpenSSL has no SHA-2 implementation: the library is unusable")
            }
            self.sha256 = sha256
            self.sha384 = sha384
        }
    }
    private static let algorithms = Algorithms()

    /// The digest named by an OpenSSL NID (`NID_sha256` or `NID_sha384`) of `bytes`; nil for another NID.
    static func hash(nid: Int32, _ bytes: UnsafeRawBufferPointer) -> [UInt8]? {
        let md: OpaquePointer
        switch nid {
        case NID_sha256: md = algorithms.sha256
        case NID_sha384: md = algorithms.sha384
        default: return nil
        }
        return [UInt8](unsafeUninitializedCapacity: 64) { out, count in
            var length: UInt32 = 0
            let ok = EVP_Digest(bytes.baseAddress, bytes.count, out.baseAddress, &length, md, nil)
            precondition(ok == 1, "EVP_Digest(SHA-2) failed")
            count = Int(length)
        }
    }
}
