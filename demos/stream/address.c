/* Numeric addresses for the stream programs (see address.h). */
#include "address.h"

#include <arpa/inet.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

static int port_parse(const char *text, unsigned *port) {
  char *end = NULL;
  unsigned long value = strtoul(text, &end, 10);
  if (text[0] == '\0' || *end != '\0' || value > 65535) return -1;
  *port = (unsigned)value;
  return 0;
}

int address_parse(const char *host, const char *port, struct sockaddr_storage *out, int *socklen) {
  unsigned number = 0;
  memset(out, 0, sizeof *out);
  if (port_parse(port, &number) != 0) return ADDRESS_BAD_PORT;
  struct sockaddr_in *in = (struct sockaddr_in *)out;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
  if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons((unsigned short)number);
    *socklen = sizeof *in;
    return 0;
  }
  if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((unsigned short)number);
    *socklen = sizeof *in6;
    return 0;
  }
  return ADDRESS_BAD_HOST;
}

const char *address_error(int parsed) {
  return parsed == ADDRESS_BAD_PORT ? "the port is not a number from 0 to 65535"
                                    : "the address is not a numeric IPv4 or IPv6 address";
}

unsigned tcp_listener_port(struct evconnlistener *listener) {
  struct sockaddr_storage bound;
  socklen_t length = sizeof bound;
  if (getsockname(evconnlistener_get_fd(listener), (struct sockaddr *)&bound, &length) != 0) return 0;
  return address_port((struct sockaddr *)&bound);
}

unsigned address_port(const struct sockaddr *address) {
  if (address->sa_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)address)->sin6_port);
  return ntohs(((const struct sockaddr_in *)address)->sin_port);
}
