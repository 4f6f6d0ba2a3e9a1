/* What the stream programs share that is not their protocol: a numeric IPv4 or IPv6 address and
 * a port as a sockaddr, and the words for a transport. */
#ifndef EVRDMA_DEMOS_STREAM_ADDRESS_H
#define EVRDMA_DEMOS_STREAM_ADDRESS_H

#include <sys/socket.h>

/* Fills `out` from a numeric host and a port ("0": any free one); 0, or -1 if either is not. */
int address_parse(const char *host, const char *port, struct sockaddr_storage *out, int *socklen);
/* The port of an IPv4 or IPv6 address. */
unsigned address_port(const struct sockaddr *address);

#endif
