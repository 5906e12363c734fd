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
#endif
