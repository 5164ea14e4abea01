internal import CAppAttestOpenSSL
import Synchronization

/// Verifies a leaf certificate through untrusted intermediates to one pinned root with OpenSSL's
/// `X509_verify_cert`, at a given time.
///
/// Speed without a weaker check: a chain costs two P-384 signature verifications (root → intermediate,
/// intermediate → leaf), and Debian's OpenSSL does about 1.2k of them a second (CONTRIBUTING.md, “OpenSSL and
/// libcbor”). Every App Attest
/// chain shares one intermediate, so once an intermediate's exact DER bytes have been verified against the
/// pinned root, the result is remembered: later chains whose intermediate is byte-identical are verified by
/// OpenSSL with that intermediate as the anchor (all of OpenSSL's checks on the leaf and on the intermediate,
/// including its validity at the requested time), and the root's validity window is checked here. The
/// root's signature over those bytes cannot change, so nothing is skipped but a repeated computation. Only
/// intermediates that OpenSSL itself chained to the pinned root enter the cache, and the cache is bounded.
package final class ChainVerifier: Sendable {
    /// Why a chain was refused.
    package enum Failure: Error, Sendable, Equatable {
        /// A certificate is outside its validity period at the verification time.
        case validity(String)
        /// Anything else: no path to the root, a bad signature, a constraint violated.
        case chain(String)
        /// A certificate is not DER that OpenSSL can parse.
        case unparseable(String)
        /// OpenSSL could not run the verification at all.
        case internalError(String)
    }

    private let root: X509Certificate
    private let rootStore: Store
    private let rootValidity: ClosedRange<Int64>
    private let cache = Mutex<[[UInt8]: CachedIntermediate]>([:])
    private static let cacheLimit = 8

    /// - Parameter root: the only trust anchor; it must be self-signed.
    package init(root: X509Certificate) throws(Failure) {
        guard let notBefore = root.notBefore, let notAfter = root.notAfter, notBefore <= notAfter else {
            throw .chain("trust anchor has no usable validity period")
        }
        self.root = root
        self.rootValidity = notBefore...notAfter
        self.rootStore = try Store(trusting: [root], partialChain: false)
    }

    /// The pinned root.
    package var trustAnchor: X509Certificate { root }

    /// Verifies `leaf` through the DER `intermediates` to the pinned root at `time` (Unix seconds).
    ///
    /// An intermediate already verified against the root is not parsed or verified again (see the type's
    /// discussion); any other is parsed here, and one that does not parse is `.unparseable`.
    package func verify(leaf: X509Certificate, intermediates: [[UInt8]], at time: Int64) throws(Failure) {
        if intermediates.count == 1, rootValidity.contains(time),
            let cached = cache.withLock({ $0[intermediates[0]] })
        {
            let chain = try cached.store.verify(leaf: leaf, untrusted: [], at: time)
            try Self.requireShape(chain, [leaf.derBytes, intermediates[0]])
            return
        }
        var parsed: [X509Certificate] = []
        for der in intermediates {
            do { parsed.append(try X509Certificate(derEncoded: der)) } catch {
                throw .unparseable("intermediate certificate: \(error)")
            }
        }
        let chain = try rootStore.verify(leaf: leaf, untrusted: parsed, at: time)
        try Self.requireShape(chain, [leaf.derBytes] + intermediates + [root.derBytes])
        remember(chain: chain, given: parsed)
    }

    /// Verifies `leaf` to the pinned root through any of the `untrusted` certificates (which may include a copy
    /// of a root: it is never trusted, the store's pinned root is), at `time`. For CMS signers, whose messages
    /// carry their whole chain (“Receipts and the risk metric”).
    package func verifyPath(leaf: X509Certificate, untrusted: [X509Certificate], at time: Int64) throws(Failure) {
        let chain = try rootStore.verify(leaf: leaf, untrusted: untrusted, at: time)
        guard chain.first?.derBytes == leaf.derBytes, chain.last?.derBytes == root.derBytes else {
            throw .chain("the signer's chain does not end at the pinned root")
        }
    }

    /// OpenSSL builds the shortest path it can find, which need not use every certificate given, nor in the
    /// given order (an intermediate passed as the leaf verifies on its own). The chain must be exactly
    /// leaf → each given intermediate → root.
    private static func requireShape(_ chain: [X509Certificate], _ expected: [[UInt8]]) throws(Failure) {
        guard chain.count == expected.count, zip(chain, expected).allSatisfy({ $0.derBytes == $1 }) else {
            throw .chain(
                "the certificates do not form the chain leaf → intermediate → root (OpenSSL built \(chain.count) links)"
            )
        }
    }

    /// Caches an intermediate that OpenSSL placed between the leaf and the pinned root.
    private func remember(chain: [X509Certificate], given intermediates: [X509Certificate]) {
        guard intermediates.count == 1, chain.count == 3,
            chain[1].derBytes == intermediates[0].derBytes, chain[2].derBytes == root.derBytes
        else { return }
        let intermediate = intermediates[0]
        guard cache.withLock({ $0.count < Self.cacheLimit && $0[intermediate.derBytes] == nil }) else { return }
        guard let store = try? Store(trusting: [intermediate], partialChain: true) else { return }
        cache.withLock { cache in
            if cache.count < Self.cacheLimit { cache[intermediate.derBytes] = CachedIntermediate(store: store) }
        }
    }

    /// How many intermediates are remembered (for tests and diagnostics).
    package var cachedIntermediateCount: Int { cache.withLock { $0.count } }

    private struct CachedIntermediate: Sendable {
        let store: Store
    }

    /// An `X509_STORE` holding trusted certificates. `@unchecked Sendable`: an X509_STORE is built once and
    /// then only read by `X509_verify_cert`, which OpenSSL supports from many threads (its lookups lock).
    private final class Store: @unchecked Sendable {
        let pointer: OpaquePointer
        let trusted: [X509Certificate]

        init(trusting certificates: [X509Certificate], partialChain: Bool) throws(Failure) {
            clearOpenSSLErrors()
            guard let store = aa_store_new(partialChain ? 1 : 0) else {
                throw .internalError(OpenSSLError.drain("X509_STORE_new").description)
            }
            for certificate in certificates {
                // X509_STORE_add_cert takes its own reference (CONTRIBUTING.md, “OpenSSL and libcbor”).
                guard X509_STORE_add_cert(store, certificate.pointer) == 1 else {
                    X509_STORE_free(store)
                    throw .internalError(OpenSSLError.drain("X509_STORE_add_cert").description)
                }
            }
            pointer = store
            trusted = certificates
        }

        deinit { X509_STORE_free(pointer) }

        /// Runs X509_verify_cert; returns the verified chain, leaf first.
        @discardableResult
        func verify(leaf: X509Certificate, untrusted: [X509Certificate], at time: Int64) throws(Failure)
            -> [X509Certificate]
        {
            clearOpenSSLErrors()
            guard let stack = aa_sk_x509_new() else {
                throw .internalError(OpenSSLError.drain("sk_X509_new").description)
            }
            defer { aa_sk_x509_free_all(stack) }
            for certificate in untrusted where aa_sk_x509_push_ref(stack, certificate.pointer) != 1 {
                throw .internalError(OpenSSLError.drain("sk_X509_push").description)
            }
            guard let context = X509_STORE_CTX_new() else {
                throw .internalError(OpenSSLError.drain("X509_STORE_CTX_new").description)
            }
            defer { X509_STORE_CTX_free(context) }
            guard X509_STORE_CTX_init(context, pointer, leaf.pointer, stack) == 1 else {
                throw .internalError(OpenSSLError.drain("X509_STORE_CTX_init").description)
            }
            // Pin the time after init (CONTRIBUTING.md, “OpenSSL and libcbor”).
            guard aa_verify_param_set_time(context, time) == 1 else {
                throw .internalError("X509_VERIFY_PARAM_set_time failed")
            }
            let result = X509_verify_cert(context)
            guard result == 1 else {
                let code = X509_STORE_CTX_get_error(context)
                let depth = X509_STORE_CTX_get_error_depth(context)
                let reason = X509_verify_cert_error_string(Int(code)).map { String(cString: $0) } ?? "error \(code)"
                clearOpenSSLErrors()
                let message = "\(reason) (certificate at depth \(depth))"
                // A negative result is OpenSSL failing rather than judging; with hostile certificates it
                // happens for unusable keys or extensions (X509_V_ERR_UNSPECIFIED at the leaf, found by the
                // mutation tests). The certificates came from the input, so it is a refused chain.
                switch code {
                case X509_V_ERR_CERT_NOT_YET_VALID, X509_V_ERR_CERT_HAS_EXPIRED:
                    throw .validity(message)
                default:
                    throw .chain(message)
                }
            }
            // Map the verified chain back onto the Swift-owned certificates by pointer identity.
            guard let chain = X509_STORE_CTX_get0_chain(context) else { return [leaf] }
            let known = [leaf] + untrusted + trusted
            var verified: [X509Certificate] = []
            for index in 0..<aa_sk_x509_count(chain) {
                let pointer = aa_sk_x509_at(chain, index)
                guard let match = known.first(where: { $0.pointer == pointer }) else { return verified }
                verified.append(match)
            }
            return verified
        }
    }
}
