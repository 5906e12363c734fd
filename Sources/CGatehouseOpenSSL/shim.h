#ifndef CGATEHOUSE_OPENSSL_SHIM_H
#define CGATEHOUSE_OPENSSL_SHIM_H
// OpenSSL headers for Swift, plus wrappers for the macros the importer cannot see.
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
// JWT verification (GatehouseJWT): keys from JWK parameters, ECDSA signature conversion.
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

static inline long gh_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
  return SSL_CTX_set_min_proto_version(ctx, version);
}
static inline long gh_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_mode(ctx, mode); }
static inline long gh_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
  return SSL_set_tlsext_host_name(ssl, name);
}
static inline int gh_EVP_CTRL_GCM_SET_IVLEN(void) { return EVP_CTRL_GCM_SET_IVLEN; }
static inline int gh_EVP_CTRL_GCM_GET_TAG(void) { return EVP_CTRL_GCM_GET_TAG; }
static inline int gh_EVP_CTRL_GCM_SET_TAG(void) { return EVP_CTRL_GCM_SET_TAG; }

// TLS (GatehouseNet): option bits and control macros the importer cannot see.
static inline uint64_t gh_SSL_OP_NO_RENEGOTIATION(void) { return SSL_OP_NO_RENEGOTIATION; }
static inline uint64_t gh_SSL_OP_NO_COMPRESSION(void) { return SSL_OP_NO_COMPRESSION; }
static inline uint64_t gh_SSL_OP_CIPHER_SERVER_PREFERENCE(void) { return SSL_OP_CIPHER_SERVER_PREFERENCE; }
static inline uint64_t gh_SSL_OP_IGNORE_UNEXPECTED_EOF(void) { return SSL_OP_IGNORE_UNEXPECTED_EOF; }
static inline long gh_SSL_CTX_set_read_ahead(SSL_CTX *ctx, int yes) { return SSL_CTX_set_read_ahead(ctx, yes); }
static inline long gh_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long mode) {
  return SSL_CTX_set_session_cache_mode(ctx, mode);
}
static inline long gh_SSL_CTX_set_tlsext_servername_callback(SSL_CTX *ctx, int (*callback)(SSL *, int *, void *)) {
  return SSL_CTX_set_tlsext_servername_callback(ctx, callback);
}
static inline long gh_SSL_CTX_set_tlsext_servername_arg(SSL_CTX *ctx, void *arg) {
  return SSL_CTX_set_tlsext_servername_arg(ctx, arg);
}
static inline void gh_BIO_set_retry_read(BIO *bio) { BIO_set_retry_read(bio); }
static inline void gh_BIO_set_retry_write(BIO *bio) { BIO_set_retry_write(bio); }
static inline void gh_BIO_clear_retry_flags(BIO *bio) { BIO_clear_retry_flags(bio); }

// JWT verification (GatehouseJWT): selection and type macros the importer cannot see.
static inline int gh_EVP_PKEY_PUBLIC_KEY(void) { return EVP_PKEY_PUBLIC_KEY; }
static inline int gh_EVP_PKEY_ED25519(void) { return EVP_PKEY_ED25519; }
static inline int gh_RSA_PKCS1_PSS_PADDING(void) { return RSA_PKCS1_PSS_PADDING; }
#endif
