/* TLS over any bufferevent (tls.h). */
#include "tls.h"

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stdio.h>

const char *tls_last_error(void) {
  static char text[256];
  unsigned long code = 0, last = 0;
  while ((code = ERR_get_error()) != 0) last = code;
  if (last == 0) return "no TLS error";
  ERR_error_string_n(last, text, sizeof text);
  return text;
}

/* A certificate for `name` over `key`, valid from now for a day, signed by its own key. */
static X509 *self_signed(EVP_PKEY *key, const char *name) {
  X509 *cert = X509_new();
  X509_NAME *subject = X509_NAME_new();
  int ok = cert != NULL && subject != NULL && X509_set_version(cert, 2) &&
           ASN1_INTEGER_set(X509_get_serialNumber(cert), 1) && X509_gmtime_adj(X509_getm_notBefore(cert), 0) &&
           X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600) &&
           X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, (const unsigned char *)name, -1, -1, 0) &&
           X509_set_subject_name(cert, subject) && X509_set_issuer_name(cert, subject) &&
           X509_set_pubkey(cert, key) && X509_sign(cert, key, EVP_sha256()) > 0;
  X509_NAME_free(subject);
  if (!ok) {
    X509_free(cert);
    return NULL;
  }
  return cert;
}

SSL_CTX *tls_server_context(const char *name) {
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *cert = key != NULL ? self_signed(key, name) : NULL;
  SSL_CTX *context = cert != NULL ? SSL_CTX_new(TLS_server_method()) : NULL;
  if (context != NULL && (SSL_CTX_use_certificate(context, cert) != 1 || SSL_CTX_use_PrivateKey(context, key) != 1)) {
    SSL_CTX_free(context);
    context = NULL;
  }
  if (context == NULL) fprintf(stderr, "tls: no server context: %s\n", tls_last_error());
  X509_free(cert);
  EVP_PKEY_free(key);
  return context;
}

SSL_CTX *tls_client_context(void) {
  SSL_CTX *context = SSL_CTX_new(TLS_client_method());
  if (context == NULL) fprintf(stderr, "tls: no client context: %s\n", tls_last_error());
  else SSL_CTX_set_verify(context, SSL_VERIFY_NONE, NULL);
  return context;
}

struct bufferevent *tls_wrap(struct bufferevent *under, SSL_CTX *context, int server) {
  SSL *ssl = under != NULL ? SSL_new(context) : NULL;
  struct bufferevent *wrapped = NULL;
  if (ssl != NULL)
    wrapped = bufferevent_openssl_filter_new(bufferevent_get_base(under), under, ssl,
                                             server ? BUFFEREVENT_SSL_ACCEPTING : BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
  if (wrapped == NULL) { /* the filter did not take them: both still ours */
    if (ssl != NULL) SSL_free(ssl);
    if (under != NULL) bufferevent_free(under);
  }
  return wrapped;
}
