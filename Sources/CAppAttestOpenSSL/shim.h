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
    // fromdata does not always check that the point lies on the curve; a public-key check does.
    EVP_PKEY_CTX *check = EVP_PKEY_CTX_new_from_pkey(NULL, key, NULL);
    if (check == NULL || EVP_PKEY_public_check(check) != 1) {
        EVP_PKEY_CTX_free(check);
        EVP_PKEY_free(key);
        return NULL;
    }
    EVP_PKEY_CTX_free(check);
    return key;
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

#endif
