/* TLS over any bufferevent with libevent's OpenSSL filter (bufferevent_openssl_filter_new): over a
 * socket's or over an evrdma stream, the same calls. The server's certificate is self-signed and
 * made in memory at start; the client checks nothing of it (these are benches and tests, not a
 * deployment: a program of its own loads its certificates and verifies its peer). */
#ifndef EVRDMA_DEMOS_STREAM_TLS_H
#define EVRDMA_DEMOS_STREAM_TLS_H

#include <openssl/ssl.h>

struct bufferevent;

/* A context for the server's side, with a fresh P-256 key and a certificate for `name`, self-signed;
 * or for the client's side. NULL (with a line on stderr) if OpenSSL failed. */
SSL_CTX *tls_server_context(const char *name);
SSL_CTX *tls_client_context(void);
/* `under` wrapped in TLS (BEV_OPT_CLOSE_ON_FREE: freeing what comes back frees `under` too), the
 * handshake started in its role; the wrapper says BEV_EVENT_CONNECTED once it is done. NULL, with
 * `under` freed, if it could not be made. */
struct bufferevent *tls_wrap(struct bufferevent *under, SSL_CTX *context, int server);
/* What OpenSSL said last of this thread's TLS (its error queue, emptied), or "no TLS error". */
const char *tls_last_error(void);

#endif
