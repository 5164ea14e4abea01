#ifndef C_APP_ATTEST_OPENSSL_SHIM_H
#define C_APP_ATTEST_OPENSSL_SHIM_H
// OpenSSL 3 (Debian's libssl-dev), libcrypto only. Swift cannot import OpenSSL's function-like macros, and
// OSSL_PARAM arrays keep pointers to their strings, so both are wrapped here as static inline functions
// (CONTRIBUTING.md, “OpenSSL and libcbor”). Nothing in this header owns memory: the Swift wrappers in AppAttestCrypto
// do.
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/params.h>
#include <openssl/provider.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <openssl/cms.h>
#include <string.h>

static inline void aa_openssl_free(void *p) { OPENSSL_free(p); }

/// Builds a P-256 public key from a 65-byte uncompressed X9.62 point. EVP_PKEY_fromdata is 5-7x faster than
/// d2i_PUBKEY on a synthesized SPKI (CONTRIBUTING.md, “OpenSSL and libcbor”). Returns NULL when the point is not on the
/// curve.
static inline EVP_PKEY *aa_p256_public_key_from_point(const unsigned char *point, size_t length) {
    if (point == NULL || length != 65 || point[0] != 0x04) return NULL;
    char group[] = "P-256";
    OSSL_PARAM params[3];
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, group, 0);
    params[1] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, (void *)point, length);
    params[2] = OSSL_PARAM_construct_end();
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (ctx == NULL) return NULL;
    EVP_PKEY *key = NULL;
    if (EVP_PKEY_fromdata_init(ctx) != 1 || EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) != 1) {
        EVP_PKEY_CTX_free(ctx);
        EVP_PKEY_free(key);
        return NULL;
    }
    EVP_PKEY_CTX_free(ctx);
    // An explicit check that the point is on the curve and not the point at infinity. The "quick" check skips
    // the full check's n·Q = O scalar multiplication (55 µs, more than half of the cost of building a key): P-256
    // has cofactor 1, so every point on the curve other than O has order n and the two checks accept the same
    // points (CONTRIBUTING.md, “OpenSSL and libcbor”).
    EVP_PKEY_CTX *check = EVP_PKEY_CTX_new_from_pkey(NULL, key, NULL);
    if (check == NULL || EVP_PKEY_public_check_quick(check) != 1) {
        EVP_PKEY_CTX_free(check);
        EVP_PKEY_free(key);
        return NULL;
    }
    EVP_PKEY_CTX_free(check);
    return key;
}

/// The P-256 group, for on-curve checks without building a key (shared read-only; created once by the caller).
static inline EC_GROUP *aa_p256_group_new(void) { return EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1); }

/// 1 when `point` is a 65-byte uncompressed P-256 point on the curve (EC_POINT_oct2point checks it, as
/// EVP_PKEY_fromdata does; the point at infinity has no uncompressed form).
static inline int aa_p256_point_is_valid(const EC_GROUP *group, const unsigned char *point, size_t length) {
    if (group == NULL || point == NULL || length != 65 || point[0] != 0x04) return 0;
    EC_POINT *decoded = EC_POINT_new(group);
    if (decoded == NULL) return 0;
    int ok = EC_POINT_oct2point(group, decoded, point, length, NULL) == 1
        && EC_POINT_is_on_curve(group, decoded, NULL) == 1 && EC_POINT_is_at_infinity(group, decoded) == 0;
    EC_POINT_free(decoded);
    return ok;
}

/// Writes the curve name of an EC key ("prime256v1", "secp384r1") into `out`; returns 1 on success.
static inline int aa_ec_group_name(const EVP_PKEY *key, char *out, size_t capacity) {
    size_t length = 0;
    return EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, out, capacity, &length);
}

/// Writes the encoded public point of an EC key (uncompressed for keys read from certificates).
static inline int aa_ec_public_point(const EVP_PKEY *key, unsigned char *out, size_t capacity, size_t *length) {
    return EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, out, capacity, length);
}

static inline int aa_pkey_is_ec(const EVP_PKEY *key) { return EVP_PKEY_is_a(key, "EC"); }

// MARK: STACK_OF(X509): every sk_X509_* is a macro.
static inline STACK_OF(X509) *aa_sk_x509_new(void) { return sk_X509_new_null(); }
/// Pushes with its own reference: the stack then owns one (CONTRIBUTING.md, “OpenSSL and libcbor”).
static inline int aa_sk_x509_push_ref(STACK_OF(X509) *stack, X509 *cert) {
    if (X509_up_ref(cert) != 1) return 0;
    if (sk_X509_push(stack, cert) <= 0) { X509_free(cert); return 0; }
    return 1;
}
static inline void aa_sk_x509_free_all(STACK_OF(X509) *stack) { sk_X509_pop_free(stack, X509_free); }
static inline int aa_sk_x509_count(const STACK_OF(X509) *stack) { return sk_X509_num(stack); }
static inline X509 *aa_sk_x509_at(const STACK_OF(X509) *stack, int index) { return sk_X509_value(stack, index); }

/// Frees a stack without freeing its elements (CMS_get0_signers returns borrowed certificates).
static inline void aa_sk_x509_free_container(STACK_OF(X509) *stack) { sk_X509_free(stack); }
static inline CMS_SignerInfo *aa_sk_cms_signer_info_at(STACK_OF(CMS_SignerInfo) *stack, int index) { return sk_CMS_SignerInfo_value(stack, index); }
static inline int aa_sk_cms_signer_info_count(STACK_OF(CMS_SignerInfo) *stack) { return sk_CMS_SignerInfo_num(stack); }

// MARK: BIO
static inline int aa_bio_reset(BIO *bio) { return (int)BIO_reset(bio); }
/// RFC 2253 name printing, keeping UTF-8 readable (XN_FLAG_RFC2253 is a compound macro).
static inline unsigned long aa_name_print_flags(void) { return XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB; }
static inline long aa_bio_mem_contents(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }

/// Builds the verification store for a given set of trusted certificates. `partial` allows a trusted
/// certificate that is not self-signed to end the chain: used only for intermediates that themselves were
/// verified against the pinned root (see ChainVerifier_openssl.swift).
static inline X509_STORE *aa_store_new(int partial) {
    X509_STORE *store = X509_STORE_new();
    if (store == NULL) return NULL;
    // Never X509_V_FLAG_X509_STRICT: it rejects Apple's genuine leaf (CONTRIBUTING.md, “OpenSSL and libcbor”).
    if (partial && X509_STORE_set_flags(store, X509_V_FLAG_PARTIAL_CHAIN) != 1) {
        X509_STORE_free(store);
        return NULL;
    }
    return store;
}

static inline int aa_verify_param_set_time(X509_STORE_CTX *ctx, long long t) {
    X509_VERIFY_PARAM *param = X509_STORE_CTX_get0_param(ctx);
    if (param == NULL) return 0;
    X509_VERIFY_PARAM_set_time(param, (time_t)t);
    return 1;
}

/// Seconds since the Unix epoch of an ASN1_TIME, or 0 with *ok = 0.
static inline long long aa_asn1_time_to_unix(const ASN1_TIME *t, int *ok) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1) { *ok = 0; return 0; }
    *ok = 1;
    return (long long)timegm(&tm);
}

// MARK: The chain verifier's fast path for leaves under a remembered intermediate (ChainVerifier.swift).

/// An OSSL_LIB_CTX with only the null provider loaded: certificates parsed in it skip OpenSSL 3.0's implicit
/// decoding of their public key (an OSSL_DECODER_CTX set up for every certificate: about 125 µs of the 145 µs that
/// d2i_X509 costs on a credCert). The structure is parsed exactly as in the default context.
static inline OSSL_LIB_CTX *aa_parse_only_libctx_new(void) {
    OSSL_LIB_CTX *ctx = OSSL_LIB_CTX_new();
    if (ctx == NULL) return NULL;
    if (OSSL_PROVIDER_load(ctx, "null") == NULL) {
        OSSL_LIB_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/// d2i_X509 in a given library context.
static inline X509 *aa_d2i_x509_in(OSSL_LIB_CTX *ctx, const unsigned char **in, long length) {
    return (X509 *)ASN1_item_d2i_ex(NULL, in, length, ASN1_ITEM_rptr(X509), ctx, NULL);
}

/// The bytes of the first element (tbsCertificate) of a DER Certificate SEQUENCE: its offset and length, header
/// included. Definite lengths only; returns 0 for anything else.
static inline int aa_der_tbs_range(const unsigned char *der, size_t length, size_t *offset, size_t *tbsLength) {
    size_t position = 0;
    for (int level = 0; level < 2; level++) {
        if (position + 2 > length || der[position] != 0x30) return 0;
        size_t header = 2;
        size_t content = der[position + 1];
        if (content & 0x80) {
            size_t octets = content & 0x7F;
            if (octets == 0 || octets > 3 || position + 2 + octets > length) return 0;
            content = 0;
            for (size_t i = 0; i < octets; i++) content = (content << 8) | der[position + 2 + i];
            header += octets;
        }
        if (position + header + content > length) return 0;
        if (level == 0) {
            if (position + header + content != length) return 0;
            position += header;
        } else {
            *offset = position;
            *tbsLength = header + content;
        }
    }
    return 1;
}

/// 1 when the extension's OID is under Apple's arc 1.2.840.113635.100.
static inline int aa_is_apple_extension(const X509_EXTENSION *extension) {
    static const unsigned char arc[] = {0x2A, 0x86, 0x48, 0x86, 0xF7, 0x63, 0x64};
    const ASN1_OBJECT *object = X509_EXTENSION_get_object((X509_EXTENSION *)extension);
    size_t length = OBJ_length(object);
    const unsigned char *data = OBJ_get0_data(object);
    return data != NULL && length > sizeof arc && memcmp(data, arc, sizeof arc) == 0;
}

/// 1 when every extension of the certificate is one the fast path knows X509_verify_cert treats only through
/// the extension flags it checks: basic constraints, key usage, extended key usage, key identifiers, and, for a
/// leaf, Apple's own; an intermediate may also carry CRL distribution points and authority information access.
/// Anything else (name or policy constraints, policies, RFC 3779 resources…) sends the chain to X509_verify_cert.
static inline int aa_extensions_allowed(const X509 *certificate, int isLeaf) {
    int count = X509_get_ext_count(certificate);
    for (int index = 0; index < count; index++) {
        X509_EXTENSION *extension = X509_get_ext(certificate, index);
        if (extension == NULL) return 0;
        switch (OBJ_obj2nid(X509_EXTENSION_get_object(extension))) {
        case NID_basic_constraints:
        case NID_key_usage:
        case NID_ext_key_usage:
        case NID_subject_key_identifier:
        case NID_authority_key_identifier:
            continue;
        case NID_crl_distribution_points:
        case NID_info_access:
            if (!isLeaf) continue;
            return 0;
        case NID_undef:
            if (isLeaf && aa_is_apple_extension(extension)) continue;
            return 0;
        default:
            return 0;
        }
    }
    return 1;
}

/// 1 when `certificate` is valid at `t` exactly as X509_verify_cert judges it (X509_cmp_time on both bounds).
static inline int aa_valid_at(const X509 *certificate, long long t) {
    time_t when = (time_t)t;
    return X509_cmp_time(X509_get0_notBefore(certificate), &when) < 0
        && X509_cmp_time(X509_get0_notAfter(certificate), &when) > 0;
}

/// The checks X509_verify_cert makes on a leaf issued by a trusted intermediate, but for the signature, which the
/// caller verifies over the returned tbsCertificate with the returned digest. Returns 1 when every check passes;
/// 0 when the fast path declines (X509_verify_cert then judges the chain).
static inline int aa_fast_leaf_checks(
    X509 *leaf, X509 *issuer, long long t, const unsigned char *der, size_t length,
    size_t *tbsOffset, size_t *tbsLength, int *digestNID, const unsigned char **signature, size_t *signatureLength
) {
    if (X509_get_version(leaf) != X509_VERSION_3) return 0;
    // Issuer name, authority key identifier, the issuer's keyCertSign, signature algorithm against issuer key.
    if (X509_check_issued(issuer, leaf) != X509_V_OK) return 0;
    uint32_t flags = X509_get_extension_flags(leaf);
    if (flags & (EXFLAG_INVALID | EXFLAG_CRITICAL | EXFLAG_PROXY | EXFLAG_SI | EXFLAG_SS | EXFLAG_INVALID_POLICY))
        return 0;
    if (!aa_extensions_allowed(leaf, 1)) return 0;
    if (!aa_valid_at(leaf, t) || !aa_valid_at(issuer, t)) return 0;
    // X509_verify: the outer algorithm equals the inner one; a signature BIT STRING without unused bits.
    const ASN1_BIT_STRING *bits = NULL;
    const X509_ALGOR *outer = NULL;
    X509_get0_signature(&bits, &outer, leaf);
    if (bits == NULL || outer == NULL || X509_ALGOR_cmp(outer, X509_get0_tbs_sigalg(leaf)) != 0) return 0;
    if ((bits->flags & ASN1_STRING_FLAG_BITS_LEFT) && (bits->flags & 0x07)) return 0;
    int parameterType = 0;
    X509_ALGOR_get0(NULL, &parameterType, NULL, outer);
    if (parameterType != V_ASN1_UNDEF) return 0;
    switch (X509_get_signature_nid(leaf)) {
    case NID_ecdsa_with_SHA256: *digestNID = NID_sha256; break;
    case NID_ecdsa_with_SHA384: *digestNID = NID_sha384; break;
    default: return 0;
    }
    if (!aa_der_tbs_range(der, length, tbsOffset, tbsLength)) return 0;
    *signature = bits->data;
    *signatureLength = (size_t)bits->length;
    return 1;
}

/// The algorithm and point of an EC SubjectPublicKeyInfo with a named curve: the curve's NID and the BIT STRING's
/// bytes, without decoding the key. Returns 0 for any other key.
static inline int aa_spki_ec_point(const X509 *certificate, int *curveNID, const unsigned char **point, int *length) {
    X509_PUBKEY *key = X509_get_X509_PUBKEY(certificate);
    ASN1_OBJECT *algorithm = NULL;
    X509_ALGOR *parameters = NULL;
    if (key == NULL || X509_PUBKEY_get0_param(&algorithm, point, length, &parameters, key) != 1) return 0;
    if (OBJ_obj2nid(algorithm) != NID_X9_62_id_ecPublicKey || parameters == NULL) return 0;
    int type = 0;
    const void *value = NULL;
    X509_ALGOR_get0(NULL, &type, &value, parameters);
    if (type != V_ASN1_OBJECT || value == NULL) return 0;
    *curveNID = OBJ_obj2nid((const ASN1_OBJECT *)value);
    return 1;
}

#endif
