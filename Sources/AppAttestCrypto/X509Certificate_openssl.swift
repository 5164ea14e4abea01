internal import CAppAttestOpenSSL

/// An X.509 certificate parsed by OpenSSL. Owns its `X509*`, frees it in `deinit`, and lends the pointer only
/// to other wrapper files of this module (the model is NIOSSLCertificate).
///
/// `@unchecked Sendable`: the certificate is never mutated after parsing; OpenSSL's read accessors on a fully
/// parsed `X509` are safe from several threads (its cached extension data is computed under a lock).
package final class X509Certificate: @unchecked Sendable {
    let pointer: OpaquePointer
    /// The exact DER bytes the certificate was parsed from.
    package let derBytes: [UInt8]

    /// The largest certificate accepted. Apple's are about 0.6–1.1 KB (“Verifying attestations”).
    package static let maximumDERSize = 16 * 1024

    /// True when the certificate was parsed without decoding its public key (``init(derEncoded:decodingPublicKey:)``).
    package let isStructureOnly: Bool

    /// Parses one DER certificate; trailing bytes are an error (d2i_X509 ignores them, CONTRIBUTING.md, “OpenSSL and
    /// libcbor”).
    ///
    /// - Parameter decodingPublicKey: false parses the same structure without OpenSSL 3.0's implicit decoding of the
    ///   subject public key into an `EVP_PKEY` (most of the cost of parsing a credCert). Such a certificate serves
    ///   the chain verifier's fast path and the field accessors; `publicKeyInfo` and `X509_verify_cert` need the
    ///   decoded key.
    package init(derEncoded bytes: [UInt8], decodingPublicKey: Bool = true) throws(OpenSSLError) {
        guard !bytes.isEmpty, bytes.count <= Self.maximumDERSize else {
            throw OpenSSLError(operation: "d2i_X509", queue: ["certificate size \(bytes.count) out of range"])
        }
        clearOpenSSLErrors()
        let context = decodingPublicKey ? nil : ParseOnlyContext.shared.pointer
        let (parsed, consumed) = decodeDER(bytes) { aa_d2i_x509_in(context, $0, $1) }
        guard let parsed else { throw OpenSSLError.drain("d2i_X509") }
        guard consumed == bytes.count else {
            X509_free(parsed)
            throw OpenSSLError(operation: "d2i_X509", queue: ["\(bytes.count - consumed) trailing bytes"])
        }
        pointer = parsed
        derBytes = bytes
        isStructureOnly = !decodingPublicKey
        // A key that does not decode is not an error of the parse (OpenSSL decodes opportunistically).
        clearOpenSSLErrors()
    }

    /// The library context that parses without decoding keys: only the null provider is loaded, so no decoder
    /// exists in it. Created once, never freed. `@unchecked Sendable`: OpenSSL's library contexts are thread-safe.
    private final class ParseOnlyContext: @unchecked Sendable {
        let pointer: OpaquePointer
        static let shared = ParseOnlyContext()
        private init() {
            guard let context = aa_parse_only_libctx_new() else {
                fatalError("OpenSSL could not create a library context: the library is unusable")
            }
            pointer = context
        }
    }

    /// Parses a single PEM `CERTIFICATE` block.
    package convenience init(pemEncoded pem: String) throws(OpenSSLError) {
        clearOpenSSLErrors()
        let der: [UInt8]? = pem.utf8CString.withUnsafeBufferPointer { text in
            guard let bio = BIO_new_mem_buf(text.baseAddress, Int32(text.count - 1)) else { return nil }
            defer { BIO_free(bio) }
            guard let x509 = PEM_read_bio_X509(bio, nil, nil, nil) else { return nil }
            defer { X509_free(x509) }
            var out: UnsafeMutablePointer<UInt8>? = nil
            let length = i2d_X509(x509, &out)
            guard length > 0, let out else { return nil }
            defer { aa_openssl_free(out) }
            return Array(UnsafeBufferPointer(start: out, count: Int(length)))
        }
        guard let der else { throw OpenSSLError.drain("PEM_read_bio_X509") }
        try self.init(derEncoded: der)
    }

    deinit { X509_free(pointer) }

    // MARK: Names, dates, serial

    /// The subject as an RFC 2253 string (`CN=…,O=…`).
    package var subject: String { Self.describe(X509_get_subject_name(pointer)) }
    /// The issuer as an RFC 2253 string.
    package var issuer: String { Self.describe(X509_get_issuer_name(pointer)) }

    /// The subject's common name, if it has exactly one.
    package var subjectCommonName: String? {
        guard let name = X509_get_subject_name(pointer) else { return nil }
        let index = X509_NAME_get_index_by_NID(name, NID_commonName, -1)
        guard index >= 0, let entry = X509_NAME_get_entry(name, index),
            let data = X509_NAME_ENTRY_get_data(entry)
        else { return nil }
        var utf8: UnsafeMutablePointer<UInt8>? = nil
        let length = ASN1_STRING_to_UTF8(&utf8, data)
        guard length >= 0, let utf8 else { return nil }
        defer { aa_openssl_free(utf8) }
        return String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self)
    }

    /// notBefore as seconds since the Unix epoch.
    package var notBefore: Int64? { Self.unixTime(X509_get0_notBefore(pointer)) }
    /// notAfter as seconds since the Unix epoch.
    package var notAfter: Int64? { Self.unixTime(X509_get0_notAfter(pointer)) }

    /// The serial number in lowercase hex.
    package var serialNumberHex: String {
        guard let serial = X509_get0_serialNumber(pointer), let bn = ASN1_INTEGER_to_BN(serial, nil) else { return "" }
        defer { BN_free(bn) }
        guard let hex = BN_bn2hex(bn) else { return "" }
        defer { aa_openssl_free(hex) }
        return String(cString: hex).lowercased()
    }

    /// The signature algorithm's short name, e.g. `ecdsa-with-SHA256`.
    package var signatureAlgorithm: String {
        let nid = X509_get_signature_nid(pointer)
        guard let name = OBJ_nid2ln(nid) else { return "unknown" }
        return String(cString: name)
    }

    // MARK: Public key

    /// The subject public key: its curve name and encoded point, for EC keys.
    package struct PublicKeyInfo: Sendable, Equatable {
        package var curve: String?
        package var point: [UInt8]?
        package var algorithm: String
    }

    package var publicKeyInfo: PublicKeyInfo {
        guard let key = X509_get0_pubkey(pointer) else {
            return PublicKeyInfo(curve: nil, point: nil, algorithm: "unknown")
        }
        guard aa_pkey_is_ec(key) == 1 else {
            let name = EVP_PKEY_get0_type_name(key).map { String(cString: $0) } ?? "unknown"
            return PublicKeyInfo(curve: nil, point: nil, algorithm: name)
        }
        var group = [CChar](repeating: 0, count: 64)
        let curve: String? =
            aa_ec_group_name(key, &group, group.count) == 1
            ? String(decoding: group.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
        var point = [UInt8](repeating: 0, count: 133)
        var length = 0
        let encoded: [UInt8]? =
            aa_ec_public_point(key, &point, point.count, &length) == 1 ? Array(point.prefix(length)) : nil
        clearOpenSSLErrors()
        return PublicKeyInfo(curve: curve, point: encoded, algorithm: "EC")
    }

    /// The named curve and point of an EC subject public key, read from the SubjectPublicKeyInfo without decoding
    /// the key (works on structure-only certificates); nil for any other key.
    package var ecPublicKeyPoint: (curve: String, point: [UInt8])? {
        var nid: Int32 = 0
        var bytes: UnsafePointer<UInt8>? = nil
        var length: Int32 = 0
        guard aa_spki_ec_point(pointer, &nid, &bytes, &length) == 1, let bytes, length >= 0,
            let name = OBJ_nid2sn(nid)
        else { return nil }
        return (String(cString: name), Array(UnsafeBufferPointer(start: bytes, count: Int(length))))
    }

    // MARK: Extensions

    /// One extension: its dotted OID, criticality and the DER bytes inside its `extnValue` OCTET STRING.
    package struct Extension: Sendable, Equatable {
        package var oid: String
        package var name: String?
        package var isCritical: Bool
        package var value: [UInt8]
    }

    /// Every extension in certificate order.
    package var extensions: [Extension] {
        let count = X509_get_ext_count(pointer)
        guard count > 0 else { return [] }
        var result: [Extension] = []
        for index in 0..<count {
            guard let ext = X509_get_ext(pointer, index), let object = X509_EXTENSION_get_object(ext) else { continue }
            var text = [CChar](repeating: 0, count: 128)
            let written = OBJ_obj2txt(&text, Int32(text.count), object, 1)
            guard written > 0, Int(written) < text.count else { continue }
            let oid = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let nid = OBJ_obj2nid(object)
            let name = nid == NID_undef ? nil : OBJ_nid2ln(nid).map { String(cString: $0) }
            var value: [UInt8] = []
            if let data = X509_EXTENSION_get_data(ext), let bytes = ASN1_STRING_get0_data(data) {
                value = Array(UnsafeBufferPointer(start: bytes, count: Int(ASN1_STRING_length(data))))
            }
            result.append(
                Extension(oid: oid, name: name, isCritical: X509_EXTENSION_get_critical(ext) == 1, value: value))
        }
        return result
    }

    /// The value of the extension with this dotted OID; nil when absent. More than one occurrence is an error
    /// (RFC 5280 §4.2), reported as `.duplicate`.
    package enum ExtensionLookup: Equatable, Sendable {
        case absent
        case duplicate
        case value([UInt8])
    }

    package func extensionValue(oid: String) -> ExtensionLookup {
        Self.extensionValue(oid: oid, in: extensions)
    }

    /// The same lookup in an extension list read once, for callers that need several extensions.
    package static func extensionValue(oid: String, in extensions: [Extension]) -> ExtensionLookup {
        let matches = extensions.filter { $0.oid == oid }
        switch matches.count {
        case 0: return .absent
        case 1: return .value(matches[0].value)
        default: return .duplicate
        }
    }

    // MARK: Helpers

    private static func describe(_ name: OpaquePointer?) -> String {
        guard let name, let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        guard X509_NAME_print_ex(bio, name, 0, aa_name_print_flags()) >= 0 else { return "" }
        var data: UnsafeMutablePointer<CChar>? = nil
        let length = aa_bio_mem_contents(bio, &data)
        guard length > 0, let data else { return "" }
        return String(
            decoding: UnsafeRawBufferPointer(start: data, count: length).bindMemory(to: UInt8.self), as: UTF8.self)
    }

    private static func unixTime(_ time: UnsafePointer<ASN1_TIME>?) -> Int64? {
        guard let time else { return nil }
        var ok: Int32 = 0
        let seconds = aa_asn1_time_to_unix(time, &ok)
        return ok == 1 ? Int64(seconds) : nil
    }
}
