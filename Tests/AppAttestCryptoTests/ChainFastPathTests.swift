import AppAttest
import AppAttestCrypto
import Crypto
import Foundation
import SwiftASN1
import Testing
import X509

/// The chain verifier's fast path (“Verifying attestations”, Performance) may only accept what `X509_verify_cert`
/// accepts. Each case below is judged twice by the same verifier: once with the fast path allowed, once with
/// OpenSSL alone. The outcomes must be equal, the fast path must never be the one accepting a chain OpenSSL refuses,
/// and it must really serve the leaves shaped like Apple's (otherwise the speed-up would be imaginary).
@Suite("Chain verification fast path")
struct ChainFastPathTests {
    /// A P-384 root and intermediate like Apple's, and leaves built to order.
    struct Authority {
        let rootKey = P384.Signing.PrivateKey()
        let intermediateKey = P384.Signing.PrivateKey()
        let rootName: DistinguishedName
        let intermediateName: DistinguishedName
        let root: [UInt8]
        let intermediate: [UInt8]
        let intermediateSKI: ArraySlice<UInt8>
        static let start = Date(timeIntervalSince1970: 1_600_000_000)
        static let end = Date(timeIntervalSince1970: 2_400_000_000)

        init(intermediateExtensions: [Certificate.Extension] = [], intermediateNotAfter: Date = end) throws {
            rootName = try DistinguishedName { CommonName("Fast Path Root") }
            intermediateName = try DistinguishedName { CommonName("Fast Path CA 1") }
            let rootPublic = Certificate.PublicKey(rootKey.publicKey)
            let rootSKI = SubjectKeyIdentifier(hash: rootPublic)
            root = try Self.der(
                Certificate(
                    version: .v3, serialNumber: .init(), publicKey: rootPublic, notValidBefore: Self.start,
                    notValidAfter: Self.end, issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA384,
                    extensions: try Certificate.Extensions {
                        Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                        Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                        rootSKI
                    }, issuerPrivateKey: Certificate.PrivateKey(rootKey)))
            let intermediatePublic = Certificate.PublicKey(intermediateKey.publicKey)
            let ski = SubjectKeyIdentifier(hash: intermediatePublic)
            intermediateSKI = ski.keyIdentifier
            var extensions = try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                AuthorityKeyIdentifier(keyIdentifier: rootSKI.keyIdentifier)
                ski
            }
            for item in intermediateExtensions { try extensions.append(item) }
            intermediate = try Self.der(
                Certificate(
                    version: .v3, serialNumber: .init(), publicKey: intermediatePublic, notValidBefore: Self.start,
                    notValidAfter: intermediateNotAfter, issuer: rootName, subject: intermediateName,
                    signatureAlgorithm: .ecdsaWithSHA384, extensions: extensions,
                    issuerPrivateKey: Certificate.PrivateKey(rootKey)))
        }

        /// A leaf shaped like a credCert, with the changes a case asks for.
        struct Leaf {
            var key: Certificate.PublicKey = .init(P256.Signing.PrivateKey().publicKey)
            var version: Certificate.Version = .v3
            var notValidBefore = Date(timeIntervalSince1970: 1_700_000_000)
            var notValidAfter = Date(timeIntervalSince1970: 1_800_000_000)
            var issuer: DistinguishedName?
            var subject: DistinguishedName?
            var signatureAlgorithm: Certificate.SignatureAlgorithm = .ecdsaWithSHA256
            var signer: P384.Signing.PrivateKey?
            var extensions: [Certificate.Extension]?
            var extra: [Certificate.Extension] = []
        }

        func leaf(_ configure: (inout Leaf) throws -> Void = { _ in }) throws -> [UInt8] {
            var leaf = Leaf()
            try configure(&leaf)
            var extensions =
                try leaf.extensions
                ?? [
                    Certificate.Extension(BasicConstraints.notCertificateAuthority, critical: true),
                    Certificate.Extension(KeyUsage(digitalSignature: true, nonRepudiation: true), critical: true),
                    Certificate.Extension(
                        oid: [1, 2, 840, 113_635, 100, 8, 2], critical: false, value: [0x30, 0x00]),
                ]
            extensions += leaf.extra
            return try Self.der(
                Certificate(
                    version: leaf.version, serialNumber: .init(), publicKey: leaf.key,
                    notValidBefore: leaf.notValidBefore, notValidAfter: leaf.notValidAfter,
                    issuer: leaf.issuer ?? intermediateName,
                    subject: try leaf.subject ?? DistinguishedName { CommonName("leaf") },
                    signatureAlgorithm: leaf.signatureAlgorithm,
                    extensions: leaf.version == .v3 ? try Certificate.Extensions(extensions) : Certificate.Extensions(),
                    issuerPrivateKey: Certificate.PrivateKey(leaf.signer ?? intermediateKey)))
        }

        static func der(_ certificate: Certificate) throws -> [UInt8] {
            var serializer = DER.Serializer()
            try serializer.serialize(certificate)
            return serializer.serializedBytes
        }
    }

    static let time: Int64 = 1_750_000_000

    /// The outcome with the fast path allowed and with OpenSSL alone; the intermediate is remembered first.
    struct Judgement {
        var fast: Result<ChainVerifier.VerifiedChain, ChainVerifier.Failure>
        var openSSL: Result<ChainVerifier.VerifiedChain, ChainVerifier.Failure>
        var fastPathAccepted: Bool { (try? fast.get())?.usedFastPath == true }
        var openSSLAccepted: Bool { (try? openSSL.get()) != nil }
        var fastAccepted: Bool { (try? fast.get()) != nil }
    }

    static func judge(_ authority: Authority, leaf: [UInt8], at time: Int64 = time) throws -> Judgement? {
        let verifier = try ChainVerifier(root: try X509Certificate(derEncoded: authority.root))
        // Remember the intermediate through a leaf that OpenSSL accepts.
        let seed = try X509Certificate(derEncoded: try authority.leaf())
        try verifier.verify(leaf: seed, intermediates: [authority.intermediate], at: Self.time)
        #expect(verifier.cachedIntermediateCount == 1)
        guard let structureOnly = try? X509Certificate(derEncoded: leaf, decodingPublicKey: false) else { return nil }
        let fast = Result { () throws(ChainVerifier.Failure) in
            try verifier.verify(leaf: structureOnly, intermediates: [authority.intermediate], at: time)
        }
        let openSSL = Result { () throws(ChainVerifier.Failure) in
            try verifier.verify(
                leaf: structureOnly, intermediates: [authority.intermediate], at: time, allowingFastPath: false)
        }
        return Judgement(fast: fast, openSSL: openSSL)
    }

    /// Judges a case and checks the invariant; returns the judgement for case-specific expectations.
    @discardableResult
    static func check(
        _ name: String, _ authority: Authority, leaf: [UInt8], at time: Int64 = time,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Judgement? {
        guard let judgement = try judge(authority, leaf: leaf, at: time) else { return nil }
        #expect(
            judgement.fastAccepted == judgement.openSSLAccepted, "\(name): outcomes differ",
            sourceLocation: sourceLocation)
        if judgement.fastPathAccepted {
            #expect(
                judgement.openSSLAccepted, "\(name): the fast path accepted what OpenSSL refuses",
                sourceLocation: sourceLocation)
        }
        if case .failure(let fastError) = judgement.fast, case .failure(let openSSLError) = judgement.openSSL {
            #expect(fastError == openSSLError, "\(name): the refusal is not OpenSSL's", sourceLocation: sourceLocation)
        }
        return judgement
    }

    @Test("leaves shaped like Apple's are accepted by the fast path, as OpenSSL accepts them")
    func appleShapedLeaves() throws {
        let authority = try Authority()
        let plain = try #require(try Self.check("plain", authority, leaf: try authority.leaf()))
        #expect(plain.fastPathAccepted)
        #expect((try plain.fast.get()).leafKey != nil)
        let withKeyID = try #require(
            try Self.check(
                "authority key identifier", authority,
                leaf: try authority.leaf {
                    $0.extra = [
                        try Certificate.Extension(
                            AuthorityKeyIdentifier(keyIdentifier: authority.intermediateSKI), critical: false)
                    ]
                }))
        #expect(withKeyID.fastPathAccepted)
        let withEKU = try #require(
            try Self.check(
                "App Attest extended key usage", authority,
                leaf: try authority.leaf {
                    $0.extra = [
                        try Certificate.Extension(
                            ExtendedKeyUsage([.init(oid: [1, 2, 840, 113_635, 100, 4, 24])]), critical: false)
                    ]
                }))
        #expect(withEKU.fastPathAccepted)
        let sha384 = try #require(
            try Self.check(
                "ECDSA with SHA-384", authority, leaf: try authority.leaf { $0.signatureAlgorithm = .ecdsaWithSHA384 }))
        #expect(sha384.fastPathAccepted)
    }

    @Test("every refusal of OpenSSL's is also a refusal with the fast path allowed, with OpenSSL's reason")
    func refusals() throws {
        let authority = try Authority()
        let other = P384.Signing.PrivateKey()
        let cases: [(String, [UInt8])] = [
            (
                "expired",
                try authority.leaf { $0.notValidAfter = Date(timeIntervalSince1970: TimeInterval(Self.time - 1)) }
            ),
            (
                "not yet valid",
                try authority.leaf { $0.notValidBefore = Date(timeIntervalSince1970: TimeInterval(Self.time + 1)) }
            ),
            (
                "expires at the verification time",
                try authority.leaf { $0.notValidAfter = Date(timeIntervalSince1970: TimeInterval(Self.time)) }
            ),
            ("signed by another key", try authority.leaf { $0.signer = other }),
            (
                "another issuer name",
                try authority.leaf { $0.issuer = try DistinguishedName { CommonName("Fast Path CA 2") } }
            ),
            (
                "authority key identifier of another key",
                try authority.leaf {
                    $0.extra = [
                        try Certificate.Extension(AuthorityKeyIdentifier(keyIdentifier: [1, 2, 3, 4]), critical: false)
                    ]
                }
            ),
            (
                "unknown critical extension",
                try authority.leaf {
                    $0.extra = [
                        Certificate.Extension(oid: [1, 3, 6, 1, 4, 1, 99_999, 1], critical: true, value: [0x05, 0x00])
                    ]
                }
            ),
            (
                "unknown critical extension under Apple's arc",
                try authority.leaf {
                    $0.extra = [
                        Certificate.Extension(
                            oid: [1, 2, 840, 113_635, 100, 8, 99], critical: true, value: [0x05, 0x00])
                    ]
                }
            ),
            (
                "outer signature algorithm differs from the inner one",
                try Surgery.outerAlgorithm(try authority.leaf(), sha384: true)
            ),
            ("signature BIT STRING with an unused bit", try Surgery.unusedBits(try authority.leaf())),
            ("non-DER signature (a trailing byte)", try Surgery.trailingSignatureByte(try authority.leaf(), authority)),
        ]
        for (name, leaf) in cases {
            let judgement = try #require(try Self.check(name, authority, leaf: leaf))
            #expect(!judgement.openSSLAccepted, "\(name): OpenSSL accepted it, so the case tests nothing")
        }
        // Duplicate extensions, signed: whatever OpenSSL decides, the fast path decides the same.
        let duplicated = try Surgery.resigned(
            try authority.leaf {
                $0.extra = [
                    Certificate.Extension(oid: [1, 2, 840, 113_635, 100, 8, 3], critical: false, value: [0x30, 0x00])
                ]
            }, authority
        ) { tbs in
            let from: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x63, 0x64, 0x08, 0x03]
            let index = try #require(tbs.indices.first { tbs[$0...].starts(with: from) })
            tbs[index + from.count - 1] = 0x02
        }
        let judgement = try #require(try Self.check("duplicate extension", authority, leaf: duplicated))
        #expect(!judgement.fastPathAccepted || judgement.openSSLAccepted)
        // The surgery itself is sound: re-signing an unchanged leaf gives a leaf both accept.
        let unchanged = try #require(
            try Self.check(
                "re-signed unchanged", authority, leaf: try Surgery.resigned(try authority.leaf(), authority) { _ in }))
        #expect(unchanged.fastPathAccepted)
    }

    /// Edits of a leaf's DER that swift-certificates will not produce.
    enum Surgery {
        /// Splits `SEQUENCE { tbs, algorithm, BIT STRING }` into its three elements' encodings.
        static func parts(_ der: [UInt8]) throws -> (tbs: [UInt8], algorithm: [UInt8], signature: [UInt8]) {
            func element(_ bytes: ArraySlice<UInt8>) throws -> (header: Int, total: Int) {
                let start = bytes.startIndex
                let first = bytes[start + 1]
                if first < 0x80 { return (2, 2 + Int(first)) }
                let octets = Int(first & 0x7F)
                var length = 0
                for index in 0..<octets { length = length << 8 | Int(bytes[start + 2 + index]) }
                return (2 + octets, 2 + octets + length)
            }
            let outer = try element(der[...])
            var rest = der[outer.header...]
            var elements: [[UInt8]] = []
            while !rest.isEmpty {
                let next = try element(rest)
                elements.append(Array(rest.prefix(next.total)))
                rest = rest.dropFirst(next.total)
            }
            try #require(elements.count == 3)
            return (elements[0], elements[1], elements[2])
        }

        static func sequence(_ content: [UInt8]) -> [UInt8] {
            let count = content.count
            let length: [UInt8] =
                count < 0x80
                ? [UInt8(count)]
                : count < 0x100 ? [0x81, UInt8(count)] : [0x82, UInt8(count >> 8), UInt8(count & 0xFF)]
            return [0x30] + length + content
        }

        static func outerAlgorithm(_ der: [UInt8], sha384: Bool) throws -> [UInt8] {
            var (tbs, algorithm, signature) = try parts(der)
            algorithm[algorithm.count - 1] = sha384 ? 0x03 : 0x02
            return sequence(tbs + algorithm + signature)
        }

        static func unusedBits(_ der: [UInt8]) throws -> [UInt8] {
            var (tbs, algorithm, signature) = try parts(der)
            signature[2] = 0x01
            return sequence(tbs + algorithm + signature)
        }

        static func trailingSignatureByte(_ der: [UInt8], _ authority: Authority) throws -> [UInt8] {
            let (tbs, algorithm, _) = try parts(der)
            let ecdsa = try authority.intermediateKey.signature(for: SHA256.hash(data: tbs)).derRepresentation + [0x00]
            let bits: [UInt8] = [0x03, UInt8(ecdsa.count + 1), 0x00] + ecdsa
            return sequence(tbs + algorithm + bits)
        }

        /// The leaf with its tbsCertificate edited, signed again by the intermediate (ECDSA with SHA-256).
        static func resigned(
            _ der: [UInt8], _ authority: Authority, _ edit: (inout [UInt8]) throws -> Void
        ) throws -> [UInt8] {
            var (tbs, algorithm, _) = try parts(der)
            try edit(&tbs)
            let ecdsa = Array(try authority.intermediateKey.signature(for: SHA256.hash(data: tbs)).derRepresentation)
            let bits: [UInt8] = [0x03, UInt8(ecdsa.count + 1), 0x00] + ecdsa
            return sequence(tbs + algorithm + bits)
        }
    }

    @Test("what the fast path does not know goes to OpenSSL, which decides")
    func declinedCases() throws {
        let authority = try Authority()
        let cases: [(String, [UInt8])] = [
            (
                "valid from the verification time",
                try authority.leaf { $0.notValidBefore = Date(timeIntervalSince1970: TimeInterval(Self.time)) }
            ),
            ("version 1", try authority.leaf { $0.version = .v1 }),
            (
                "a non-critical extension outside the list",
                try authority.leaf {
                    $0.extra = [
                        Certificate.Extension(
                            oid: [1, 3, 6, 1, 4, 1, 99_999, 2], critical: false, value: [0x05, 0x00])
                    ]
                }
            ),
            ("a P-384 key", try authority.leaf { $0.key = .init(P384.Signing.PrivateKey().publicKey) }),
            (
                "a CA leaf",
                try authority.leaf {
                    $0.extensions = [
                        try Certificate.Extension(
                            BasicConstraints.isCertificateAuthority(maxPathLength: nil), critical: true)
                    ]
                }
            ),
            (
                "self-issued",
                try authority.leaf { $0.subject = authority.intermediateName }
            ),
        ]
        for (name, leaf) in cases {
            try Self.check(name, authority, leaf: leaf)
        }
        // An intermediate with name constraints never enables the fast path; OpenSSL judges every leaf.
        let constrained = try Authority(intermediateExtensions: [
            try Certificate.Extension(NameConstraints(permittedDNSDomains: ["example.com"]), critical: true)
        ])
        let judgement = try #require(
            try Self.check("name-constrained intermediate", constrained, leaf: try constrained.leaf()))
        #expect(!judgement.fastPathAccepted)
        // An intermediate expired at the verification time refuses every leaf, fast path or not.
        let expired = try Authority(intermediateNotAfter: Date(timeIntervalSince1970: TimeInterval(Self.time + 10)))
        let late = try #require(
            try Self.check("expired intermediate", expired, leaf: try expired.leaf(), at: Self.time + 20))
        #expect(!late.openSSLAccepted)
    }

    @Test("byte mutations of a leaf: the fast path never accepts what OpenSSL refuses", arguments: 0..<2)
    func mutations(seed: UInt64) throws {
        let authority = try Authority()
        let verifier = try ChainVerifier(root: try X509Certificate(derEncoded: authority.root))
        let base = try authority.leaf()
        try verifier.verify(
            leaf: try X509Certificate(derEncoded: base), intermediates: [authority.intermediate], at: Self.time)
        var random = seed &+ 0x9E37_79B9_7F4A_7C15
        var parsed = 0
        var fastAccepted = 0
        for round in 0..<1_500 {
            random = random &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            var leaf = base
            let position = Int((random >> 33) % UInt64(leaf.count))
            leaf[position] ^= UInt8(truncatingIfNeeded: (random >> 13) | 1)
            guard let structureOnly = try? X509Certificate(derEncoded: leaf, decodingPublicKey: false) else { continue }
            parsed += 1
            let fast = try? verifier.verify(leaf: structureOnly, intermediates: [authority.intermediate], at: Self.time)
            let openSSL = try? verifier.verify(
                leaf: structureOnly, intermediates: [authority.intermediate], at: Self.time, allowingFastPath: false)
            #expect((fast != nil) == (openSSL != nil), "seed \(seed) round \(round) byte \(position)")
            if fast?.usedFastPath == true {
                fastAccepted += 1
                #expect(openSSL != nil, "seed \(seed) round \(round) byte \(position): fast path accepted a refusal")
            }
        }
        #expect(parsed > 100)
        // The signature covers every byte of tbsCertificate, so almost nothing that parses is accepted.
        #expect(fastAccepted < parsed / 4)
    }
}
