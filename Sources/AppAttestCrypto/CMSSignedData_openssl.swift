internal import CAppAttestOpenSSL

/// A CMS SignedData message (RFC 5652) read by OpenSSL, which accepts the BER with indefinite lengths and
/// chunked content that App Attest receipts use (“Receipts and the risk metric”).
package struct CMSSignedData: Sendable {
    /// Why a message was refused.
    package enum Failure: Error, Sendable, Equatable {
        /// Not a CMS SignedData with attached content and exactly one signer.
        case malformed(String)
        /// The signature does not verify with the signer certificate.
        case signature(String)
    }

    /// The encapsulated content (for receipts, the payload), concatenated from its chunks.
    package let content: [UInt8]
    /// The certificate whose key verified the signature.
    package let signer: X509Certificate
    /// Every certificate the message carries, signer included, in message order.
    package let certificates: [X509Certificate]

    /// The largest message accepted (receipts are about 4 KB).
    package static let maximumSize = 64 * 1024

    /// Parses `bytes` and verifies the signature of its single signer over the content with the signer's key.
    /// The signer's certificate chain is not judged here: see `ChainVerifier.verifyPath`.
    package init(verifyingSignatureOf bytes: [UInt8]) throws(Failure) {
        guard !bytes.isEmpty, bytes.count <= Self.maximumSize else {
            throw .malformed("CMS message of \(bytes.count) bytes")
        }
        clearOpenSSLErrors()
        let (parsed, consumed) = decodeDER(bytes) { d2i_CMS_ContentInfo(nil, $0, $1) }
        guard let cms = parsed else { throw .malformed(OpenSSLError.drain("d2i_CMS_ContentInfo").description) }
        defer { CMS_ContentInfo_free(cms) }
        guard consumed == bytes.count else {
            throw .malformed("\(bytes.count - consumed) bytes follow the CMS message")
        }
        guard OBJ_obj2nid(CMS_get0_type(cms)) == NID_pkcs7_signed else { throw .malformed("not CMS SignedData") }
        guard let signerInfos = CMS_get0_SignerInfos(cms), aa_sk_cms_signer_info_count(signerInfos) == 1 else {
            throw .malformed("a receipt has exactly one signer")
        }
        guard let contentPointer = CMS_get0_content(cms), contentPointer.pointee != nil else {
            throw .malformed("the content is not attached")
        }
        // Collect the embedded certificates (owned by us from here on).
        var certificates: [X509Certificate] = []
        if let stack = CMS_get1_certs(cms) {
            defer { aa_sk_x509_free_all(stack) }
            let count = min(aa_sk_x509_count(stack), 8)
            for index in 0..<count {
                guard let der = Self.der(of: aa_sk_x509_at(stack, index)) else { continue }
                if let certificate = try? X509Certificate(derEncoded: der) { certificates.append(certificate) }
            }
        }
        guard let signerInfo = aa_sk_cms_signer_info_at(signerInfos, 0) else { throw .malformed("no signer") }
        guard let output = BIO_new(BIO_s_mem()) else { throw .malformed(OpenSSLError.drain("BIO_new").description) }
        defer { BIO_free(output) }
        // Signature only: the signer's chain is verified against the pinned root by the caller, never against
        // the root copy the message carries (“Receipts and the risk metric”).
        let flags = UInt32(CMS_BINARY | CMS_NO_SIGNER_CERT_VERIFY)
        if CMS_verify(cms, nil, nil, nil, output, flags) != 1 {
            let standardFailure = OpenSSLError.drain("CMS_verify").description
            // Apple's receipts of August to October 2020 carry signed attributes, yet their signature is over
            // the content itself, not over the attributes as RFC 5652 §5.4 requires (found on the recorded
            // iOS 14 vectors). Accept exactly that form: the attributes' messageDigest must match the content
            // (CMS_NO_ATTR_VERIFY still checks it), and the signer's key must verify the signature over the
            // content. The signature then binds the very bytes parsed; the unsigned attributes are not used.
            guard CMS_signed_get_attr_count(signerInfo) > 0, aa_bio_reset(output) >= 0,
                CMS_verify(cms, nil, nil, nil, output, flags | UInt32(CMS_NO_ATTR_VERIFY)) == 1,
                let signers = CMS_get0_signers(cms)
            else {
                clearOpenSSLErrors()
                throw .signature(standardFailure)
            }
            defer { aa_sk_x509_free_container(signers) }
            var data: UnsafeMutablePointer<CChar>? = nil
            let length = aa_bio_mem_contents(output, &data)
            let content =
                length > 0 && data != nil
                ? Array(UnsafeRawBufferPointer(start: data, count: length).bindMemory(to: UInt8.self)) : []
            guard aa_sk_x509_count(signers) == 1, let key = X509_get0_pubkey(aa_sk_x509_at(signers, 0)),
                let signature = CMS_SignerInfo_get0_signature(signerInfo),
                Self.verifySHA256(key: key, signature: signature, message: content)
            else {
                clearOpenSSLErrors()
                throw .signature(standardFailure)
            }
        }
        guard let signers = CMS_get0_signers(cms) else { throw .signature("no signer certificate") }
        defer { aa_sk_x509_free_container(signers) }
        guard aa_sk_x509_count(signers) == 1, let signerDER = Self.der(of: aa_sk_x509_at(signers, 0)),
            let signer = try? X509Certificate(derEncoded: signerDER)
        else { throw .signature("the signer certificate is not in the message") }
        var data: UnsafeMutablePointer<CChar>? = nil
        let length = aa_bio_mem_contents(output, &data)
        content =
            length > 0 && data != nil
            ? Array(UnsafeRawBufferPointer(start: data, count: length).bindMemory(to: UInt8.self)) : []
        self.signer = signer
        self.certificates = certificates
        clearOpenSSLErrors()
    }

    /// A signature with SHA-256 over `message`, verified with `key`; true only for OpenSSL's `== 1`.
    private static func verifySHA256(
        key: OpaquePointer, signature: UnsafeMutablePointer<ASN1_OCTET_STRING>, message: [UInt8]
    ) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1,
            let bytes = ASN1_STRING_get0_data(signature)
        else { return false }
        let length = Int(ASN1_STRING_length(signature))
        return message.withUnsafeBufferPointer { EVP_DigestVerify(context, bytes, length, $0.baseAddress, $0.count) }
            == 1
    }

    private static func der(of certificate: OpaquePointer?) -> [UInt8]? {
        guard let certificate else { return nil }
        var out: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_X509(certificate, &out)
        guard length > 0, let out else { return nil }
        defer { aa_openssl_free(out) }
        return Array(UnsafeBufferPointer(start: out, count: Int(length)))
    }
}
