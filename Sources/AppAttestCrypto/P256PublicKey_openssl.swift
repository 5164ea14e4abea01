internal import CAppAttestOpenSSL
import Synchronization

/// An ECDSA P-256 public key held by OpenSSL, parsed once and reused for any number of verifications.
///
/// Verification contexts are kept in a small pool: creating and initialising an `EVP_PKEY_CTX` costs a noticeable
/// part of a P-256 verify under OpenSSL 3, and an initialised context can verify again and again (what `openssl speed` does). A context is used by one thread at a time.
package struct P256PublicKey: Sendable {
    private let lazy: LazyKey

    /// Parses a 65-byte uncompressed X9.62 point (`04 ‖ X ‖ Y`) and checks that it lies on the curve.
    package init(x963Representation point: [UInt8]) throws(OpenSSLError) {
        clearOpenSSLErrors()
        let key = point.withUnsafeBufferPointer { aa_p256_public_key_from_point($0.baseAddress, $0.count) }
        guard let key else { throw OpenSSLError.drain("P-256 public key from point") }
        lazy = LazyKey(point: point, key: VerificationKey(owning: key, point: point))
    }

    /// A point already checked to lie on the curve; OpenSSL's key is built at the first verification (what a
    /// freshly attested key needs: its first assertion comes later, if ever).
    package init?(checkedPoint point: [UInt8]) {
        let valid = point.withUnsafeBufferPointer {
            aa_p256_point_is_valid(P256Group.shared.pointer, $0.baseAddress, $0.count)
        }
        clearOpenSSLErrors()
        guard valid == 1 else { return nil }
        lazy = LazyKey(point: point, key: nil)
    }

    /// The 65-byte uncompressed point.
    package var x963Representation: [UInt8] { lazy.point }

    private var storage: VerificationKey {
        get throws(OpenSSLError) { try lazy.key() }
    }

    /// Verifies a DER ECDSA signature over an already computed SHA-256 digest.
    ///
    /// - Returns: true only when OpenSSL reports a valid signature (`== 1`, CONTRIBUTING.md, “OpenSSL and libcbor”); a
    /// malformed signature,
    ///   a non-DER encoding (OpenSSL re-encodes and compares) or an internal error all give false.
    package func isValidSignature(derEncoded signature: [UInt8], sha256Digest digest: [UInt8]) -> Bool {
        guard digest.count == 32, !signature.isEmpty, signature.count <= 80 else { return false }
        guard let key = try? storage else { return false }
        return signature.withUnsafeBufferPointer { sig in
            digest.withUnsafeBufferPointer { key.verify(signature: sig, digest: $0) }
        }
    }

    /// Verifies a DER ECDSA-with-SHA-256 signature over `message` (the message is hashed here).
    package func isValidSignature(derEncoded signature: [UInt8], message: [UInt8]) -> Bool {
        isValidSignature(derEncoded: signature, sha256Digest: SHA256.hash(message))
    }

    fileprivate var storageKey: OpaquePointer { (try? storage)!.key }
}

/// The point, and OpenSSL's key for it once built. `@unchecked Sendable`: the point is immutable and the key is
/// built once under the mutex.
private final class LazyKey: @unchecked Sendable {
    let point: [UInt8]
    private let built: Mutex<VerificationKey?>

    init(point: [UInt8], key: VerificationKey?) {
        self.point = point
        self.built = Mutex(key)
    }

    func key() throws(OpenSSLError) -> VerificationKey {
        let result = built.withLock { built -> Result<VerificationKey, OpenSSLError> in
            if let built { return .success(built) }
            clearOpenSSLErrors()
            let key = point.withUnsafeBufferPointer { aa_p256_public_key_from_point($0.baseAddress, $0.count) }
            guard let key else { return .failure(OpenSSLError.drain("P-256 public key from point")) }
            let made = VerificationKey(owning: key, point: point)
            built = made
            return .success(made)
        }
        return try result.get()
    }
}

/// The P-256 group, created once, only read afterwards. `@unchecked Sendable`: an EC_GROUP is not modified by the
/// point operations that read it.
private final class P256Group: @unchecked Sendable {
    let pointer: OpaquePointer
    static let shared = P256Group()
    private init() {
        guard let group = aa_p256_group_new() else { fatalError("OpenSSL has no P-256 group: the library is unusable") }
        pointer = group
    }
}

/// An EC public key held by OpenSSL with a small pool of initialised verification contexts.
///
/// Creating and initialising an `EVP_PKEY_CTX` costs a noticeable part of a P-256 verify under OpenSSL 3, and an
/// initialised context can verify again and again (what `openssl speed` does). A context is used by
/// one thread at a time; threads that verify at once each take their own, so the pool never serialises them.
///
/// `@unchecked Sendable`: the key is immutable after creation (OpenSSL allows concurrent readers), and the pool is
/// guarded by a `Mutex` held only to push or pop a pointer.
final class VerificationKey: @unchecked Sendable {
    let key: OpaquePointer
    /// The encoded point, when the owner keeps it.
    let point: [UInt8]
    private let pool = Mutex<[ContextHandle]>([])
    private static let poolLimit = 16

    /// Takes ownership of one reference to `key`.
    init(owning key: OpaquePointer, point: [UInt8] = []) {
        self.key = key
        self.point = point
    }

    /// Verifies a DER ECDSA signature over a digest; true only when OpenSSL returns exactly 1.
    func verify(signature: UnsafeBufferPointer<UInt8>, digest: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let context = takeContext() else {
            clearOpenSSLErrors()
            return false
        }
        clearOpenSSLErrors()
        let result = EVP_PKEY_verify(context, signature.baseAddress, signature.count, digest.baseAddress, digest.count)
        if result == 1 {
            returnContext(context)
            return true
        }
        // After a failure the context's state is not something to rely on: drop it, and the error queue.
        EVP_PKEY_CTX_free(context)
        clearOpenSSLErrors()
        return false
    }

    /// An idle verification context. `@unchecked Sendable`: a context in the pool belongs to no thread; it
    /// is handed to exactly one caller at a time under the pool's lock.
    private struct ContextHandle: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    private func takeContext() -> OpaquePointer? {
        if let handle = pool.withLock({ $0.popLast() }) { return handle.pointer }
        guard let context = EVP_PKEY_CTX_new(key, nil) else { return nil }
        guard EVP_PKEY_verify_init(context) == 1 else {
            EVP_PKEY_CTX_free(context)
            return nil
        }
        return context
    }

    private func returnContext(_ context: OpaquePointer) {
        let kept = pool.withLock { pool -> Bool in
            guard pool.count < Self.poolLimit else { return false }
            pool.append(ContextHandle(pointer: context))
            return true
        }
        if !kept { EVP_PKEY_CTX_free(context) }
    }

    deinit {
        for handle in pool.withLock({ $0 }) { EVP_PKEY_CTX_free(handle.pointer) }
        EVP_PKEY_free(key)
    }
}

/// The raw OpenSSL P-256 verify rate on this machine, measured the way `openssl speed ecdsap256` does: one
/// initialised context, a precomputed digest. `appattest-dev bench` reports it beside the library's own figures.
package enum RawOpenSSLBenchmark {
    /// Runs `iterations` verifications; returns how many succeeded (all of them, on a sound build).
    package static func verifyLoop(
        key: P256PublicKey, signature: [UInt8], digest: [UInt8], iterations: Int
    ) -> Int {
        let context = key.rawContextForBenchmark()
        defer { EVP_PKEY_CTX_free(context) }
        var valid = 0
        signature.withUnsafeBufferPointer { sig in
            digest.withUnsafeBufferPointer { dgst in
                for _ in 0..<iterations
                where EVP_PKEY_verify(context, sig.baseAddress, sig.count, dgst.baseAddress, 32) == 1 {
                    valid += 1
                }
            }
        }
        return valid
    }
}

extension P256PublicKey {
    fileprivate func rawContextForBenchmark() -> OpaquePointer {
        let context = EVP_PKEY_CTX_new(storageKey, nil)!
        precondition(EVP_PKEY_verify_init(context) == 1)
        return context
    }
}
