internal import CAppAttestOpenSSL
import Synchronization

/// Verifies a leaf certificate through untrusted intermediates to one pinned root with OpenSSL's
/// `X509_verify_cert`, at a given time.
///
/// Speed without a weaker check: a chain costs two P-384 signature verifications (root → intermediate,
/// intermediate → leaf), and Debian's OpenSSL does about 1.1k of them a second (CONTRIBUTING.md, “OpenSSL and
/// libcbor”). Every App Attest chain shares one intermediate, so once an intermediate's exact DER bytes have been
/// chained to the pinned root by `X509_verify_cert`, the result is remembered: the root's signature over those
/// bytes cannot change, so nothing is skipped but a repeated computation. Only intermediates that OpenSSL itself
/// chained to the pinned root enter the cache, and the cache is bounded. A leaf under a remembered intermediate is
/// then checked by the fast path (`fastPath(leaf:under:at:)`), which makes `X509_verify_cert`'s checks on a leaf
/// directly and can only accept; anything it does not accept is judged by `X509_verify_cert` with the intermediate
/// as the anchor (all of OpenSSL's checks on the leaf and on the intermediate, including its validity at the
/// requested time), the root's validity window being checked here.
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

    /// What a successful verification established.
    package struct VerifiedChain: Sendable {
        /// The leaf's P-256 key, when the fast path built it while checking the chain (it must decode for the
        /// chain to verify); nil after `X509_verify_cert`, and for leaves with another kind of key.
        package var leafKey: P256PublicKey?
        /// True when the leaf was judged by the fast path under a remembered intermediate.
        package var usedFastPath: Bool
    }

    /// Verifies `leaf` through the DER `intermediates` to the pinned root at `time` (Unix seconds).
    ///
    /// A leaf under a remembered intermediate goes through the fast path first (see ``fastPath(leaf:under:at:)``);
    /// whatever the fast path does not accept, and every other chain, is judged by `X509_verify_cert`, so refusals
    /// and their reasons are always OpenSSL's. `leaf` may be structure-only (parsed without its key decoded); it is
    /// parsed again with its key for `X509_verify_cert`.
    @discardableResult
    package func verify(
        leaf: X509Certificate, intermediates: [[UInt8]], at time: Int64, allowingFastPath: Bool = true
    ) throws(Failure) -> VerifiedChain {
        let cached =
            intermediates.count == 1 && rootValidity.contains(time)
            ? cache.withLock({ $0[intermediates[0]] }) : nil
        if let cached, cached.fastPathEligible, allowingFastPath,
            let key = Self.fastPath(leaf: leaf, under: cached, at: time)
        {
            return VerifiedChain(leafKey: key, usedFastPath: true)
        }
        let fullLeaf: X509Certificate
        if leaf.isStructureOnly {
            do { fullLeaf = try X509Certificate(derEncoded: leaf.derBytes) } catch {
                throw .unparseable("leaf certificate: \(error)")
            }
        } else {
            fullLeaf = leaf
        }
        if let cached {
            let chain = try cached.store.verify(leaf: fullLeaf, untrusted: [], at: time)
            try Self.requireShape(chain, [fullLeaf.derBytes, intermediates[0]])
            return VerifiedChain(leafKey: nil, usedFastPath: false)
        }
        var parsed: [X509Certificate] = []
        for der in intermediates {
            do { parsed.append(try X509Certificate(derEncoded: der)) } catch {
                throw .unparseable("intermediate certificate: \(error)")
            }
        }
        let chain = try rootStore.verify(leaf: fullLeaf, untrusted: parsed, at: time)
        try Self.requireShape(chain, [fullLeaf.derBytes] + intermediates + [root.derBytes])
        remember(chain: chain, given: parsed)
        return VerifiedChain(leafKey: nil, usedFastPath: false)
    }

    /// The fast path for a leaf under an intermediate that `X509_verify_cert` has already chained to the pinned
    /// root: the checks `X509_verify_cert` makes on such a leaf, made directly, with the leaf's signature verified
    /// by a pooled context on the intermediate's key (“Verifying attestations”, Performance).
    ///
    /// It accepts only when every check passes: version 3; `X509_check_issued` (issuer name, authority key
    /// identifier, the intermediate's keyCertSign, signature algorithm against the intermediate's key type); no
    /// invalid, unhandled critical or proxy extension, not self-issued, and only extensions whose handling is
    /// those flags (anything else goes to OpenSSL); the leaf and the intermediate valid at `time` by
    /// `X509_cmp_time`, as OpenSSL compares; the root's validity (checked by the caller); outer and inner signature
    /// algorithms identical, ECDSA with SHA-256 or SHA-384 and no parameters, a signature BIT STRING without unused
    /// bits; the signature verified over the exact DER of tbsCertificate; and the leaf's key a P-256 point on the
    /// curve (OpenSSL would have to decode it). It returns nil otherwise, and the caller runs `X509_verify_cert`:
    /// the fast path can only accept what OpenSSL accepts, never refuse on its own.
    private static func fastPath(leaf: X509Certificate, under cached: CachedIntermediate, at time: Int64)
        -> P256PublicKey?
    {
        guard let issuerKey = cached.key else { return nil }
        clearOpenSSLErrors()
        defer { clearOpenSSLErrors() }
        var tbsOffset = 0
        var tbsLength = 0
        var digestNID: Int32 = 0
        var signature: UnsafePointer<UInt8>? = nil
        var signatureLength = 0
        let passed = leaf.derBytes.withUnsafeBufferPointer { der in
            aa_fast_leaf_checks(
                leaf.pointer, cached.intermediate.pointer, time, der.baseAddress, der.count, &tbsOffset, &tbsLength,
                &digestNID, &signature, &signatureLength)
        }
        guard passed == 1, let signature, signatureLength > 0, signatureLength <= 160 else { return nil }
        guard let spki = leaf.ecPublicKeyPoint, spki.curve == "prime256v1", spki.point.count == 65,
            let key = P256PublicKey(checkedPoint: spki.point)
        else { return nil }
        let digest = leaf.derBytes.withUnsafeBytes { der in
            CertificateDigest.hash(
                nid: digestNID, UnsafeRawBufferPointer(rebasing: der[tbsOffset..<(tbsOffset + tbsLength)]))
        }
        guard let digest else { return nil }
        // `signature` points into the leaf's X509 structure, alive until the leaf is released.
        let valid = withExtendedLifetime(leaf) {
            digest.withUnsafeBufferPointer { digest in
                issuerKey.verify(
                    signature: UnsafeBufferPointer(start: signature, count: signatureLength), digest: digest)
            }
        }
        return valid ? key : nil
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
        let entry = CachedIntermediate(intermediate: intermediate, store: store)
        cache.withLock { cache in
            if cache.count < Self.cacheLimit { cache[intermediate.derBytes] = entry }
        }
    }

    /// How many intermediates are remembered (for tests and diagnostics).
    package var cachedIntermediateCount: Int { cache.withLock { $0.count } }

    /// An intermediate chained to the pinned root by `X509_verify_cert`, with what the fast path needs.
    private struct CachedIntermediate: Sendable {
        let intermediate: X509Certificate
        let store: Store
        /// The intermediate's EC key with pooled verification contexts; nil when the fast path is not used.
        let key: VerificationKey?
        var fastPathEligible: Bool { key != nil }

        init(intermediate: X509Certificate, store: Store) {
            self.intermediate = intermediate
            self.store = store
            // The fast path serves intermediates with an EC key and only the extensions whose effect on a leaf it
            // reproduces (no name constraints, policies…); other intermediates always go through OpenSSL.
            if aa_extensions_allowed(intermediate.pointer, 0) == 1, let pkey = X509_get0_pubkey(intermediate.pointer),
                aa_pkey_is_ec(pkey) == 1, EVP_PKEY_up_ref(pkey) == 1
            {
                key = VerificationKey(owning: pkey)
            } else {
                key = nil
            }
            clearOpenSSLErrors()
        }
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

extension RawOpenSSLBenchmark {
    /// The raw P-384 verification an attestation needs, measured as `openssl speed ecdsap384` measures it: the
    /// credCert's signature verified with the intermediate's key through one initialised context, over a digest
    /// computed beforehand. `appattest-dev bench` reports attestations against it.
    package final class P384CertificateSignature: Sendable {
        private let key: VerificationKey
        private let signature: [UInt8]
        private let digest: [UInt8]

        /// Prepares the leaf's signature and digest; throws when the intermediate's key does not verify it.
        package init(leafDER: [UInt8], intermediateDER: [UInt8]) throws(OpenSSLError) {
            let leaf = try X509Certificate(derEncoded: leafDER, decodingPublicKey: false)
            let intermediate = try X509Certificate(derEncoded: intermediateDER)
            guard let pkey = X509_get0_pubkey(intermediate.pointer), EVP_PKEY_up_ref(pkey) == 1 else {
                throw OpenSSLError(operation: "benchmark", queue: ["the intermediate has no usable key"])
            }
            key = VerificationKey(owning: pkey)
            var tbsOffset = 0
            var tbsLength = 0
            guard
                leafDER.withUnsafeBufferPointer({ aa_der_tbs_range($0.baseAddress, $0.count, &tbsOffset, &tbsLength) })
                    == 1,
                let digest = leafDER.withUnsafeBytes({
                    CertificateDigest.hash(
                        nid: NID_sha256, UnsafeRawBufferPointer(rebasing: $0[tbsOffset..<(tbsOffset + tbsLength)]))
                })
            else { throw OpenSSLError(operation: "benchmark", queue: ["no tbsCertificate"]) }
            self.digest = digest
            var bits: UnsafePointer<ASN1_BIT_STRING>? = nil
            X509_get0_signature(&bits, nil, leaf.pointer)
            guard let bits, let data = bits.pointee.data else {
                throw OpenSSLError(operation: "benchmark", queue: ["no signature"])
            }
            signature = Array(UnsafeBufferPointer(start: data, count: Int(bits.pointee.length)))
            guard run(iterations: 1) == 1 else {
                throw OpenSSLError(operation: "benchmark", queue: ["the intermediate's key does not verify the leaf"])
            }
        }

        /// Runs `iterations` verifications on one context; returns how many succeeded.
        package func run(iterations: Int) -> Int {
            guard let context = EVP_PKEY_CTX_new(key.key, nil) else { return 0 }
            defer { EVP_PKEY_CTX_free(context) }
            guard EVP_PKEY_verify_init(context) == 1 else { return 0 }
            var valid = 0
            signature.withUnsafeBufferPointer { sig in
                digest.withUnsafeBufferPointer { dgst in
                    for _ in 0..<iterations
                    where EVP_PKEY_verify(context, sig.baseAddress, sig.count, dgst.baseAddress, dgst.count) == 1 {
                        valid += 1
                    }
                }
            }
            return valid
        }
    }
}
