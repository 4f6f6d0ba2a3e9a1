/* What the stream programs share that is not their protocol: a numeric IPv4 or IPv6 address and
 * a port as a sockaddr, and the words for a transport. */
#ifndef EVRDMA_DEMOS_STREAM_ADDRESS_H
#define EVRDMA_DEMOS_STREAM_ADDRESS_H

#include <sys/socket.h>

enum { ADDRESS_BAD_HOST = -1, ADDRESS_BAD_PORT = -2 };
/* Fills `out` from a numeric host and a port ("0": any free one); 0, ADDRESS_BAD_HOST or
 * ADDRESS_BAD_PORT. */
int address_parse(const char *host, const char *port, struct sockaddr_storage *out, int *socklen);
/* What a failed address_parse() found wrong, in words. */
const char *address_error(int parsed);
/* The port of an IPv4 or IPv6 address. */
unsigned address_port(const struct sockaddr *address);
struct evconnlistener;
/* The port a TCP listener is bound to (the one the kernel picked for port 0). */
unsigned tcp_listener_port(struct evconnlistener *listener);

#endif
