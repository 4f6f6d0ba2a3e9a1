/* Connecting by host name, as bufferevent_socket_connect_hostname does: each case the same steps
 * on TCP and on an evrdma stream, with one evdns_base that knows the test bed's address by a name
 * (a hosts file of the case's own) and has no name server, or one that never answers. */
#include <arpa/inet.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conformance.h"

static const char kName[] = "evrdma-conformance.test";

/* An evdns_base that knows kName as the test bed's address; any other name goes to a name server
 * that never answers (the discard port), and fails once its one try has timed out. */
static struct evdns_base* names_base(void) {
  struct sockaddr_in at = listener_address(TCP);
  char path[] = "/tmp/evrdma-hosts-XXXXXX", ip[INET_ADDRSTRLEN];
  struct evdns_base* dns = evdns_base_new(base, 0);
  int fd = mkstemp(path);
  FILE* hosts = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (dns != NULL && (evdns_base_nameserver_ip_add(dns, "127.0.0.1:9") != 0 ||
                      evdns_base_set_option(dns, "timeout:", "0.5") != 0 ||
                      evdns_base_set_option(dns, "attempts:", "1") != 0)) {
    evdns_base_free(dns, 0);
    dns = NULL;
  }
  if (dns == NULL || hosts == NULL) {
    if (hosts != NULL) fclose(hosts);
    if (dns != NULL) evdns_base_free(dns, 0);
    return NULL;
  }
  inet_ntop(AF_INET, &at.sin_addr, ip, sizeof ip);
  fprintf(hosts, "%s %s\n", ip, kName);
  fclose(hosts);
  if (evdns_base_load_hosts(dns, path) != 0) {
    evdns_base_free(dns, 0);
    dns = NULL;
  }
  unlink(path);
  return dns;
}

static struct bufferevent* connect_by_name(enum transport t, struct evdns_base* dns, const char* name) {
  const int port = ntohs(listener_address(t).sin_port);
  struct bufferevent* bev;
  if (t == RDMA) return evrdma_bufferevent_connect_hostname(rbase, dns, AF_INET, name, port, NULL);
  bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
  if (bev != NULL && bufferevent_socket_connect_hostname(bev, dns, AF_INET, name, port) != 0) {
    bufferevent_free(bev);
    return NULL;
  }
  return bev;
}

static int tcp_dns_error; /* what the socket's end said of the unknown name (TCP runs first) */

/* A connect by host name reaches the host (bytes go both ways); a name nobody knows fails with
 * BEV_EVENT_ERROR and, from bufferevent_socket_get_dns_error, the same EVUTIL_EAI_* error as the
 * socket's; a numeric address needs no name server (a stream's connect given no evdns_base uses
 * evrdma's own). */
static void a_connect_by_host_name_reaches_the_host_and_an_unknown_name_fails_as_libevent_says(enum transport t) {
  struct evdns_base* dns = names_base();
  struct link link;
  struct seen client, server, unknown;
  struct wait_bytes ping = {&server, 4}, pong = {&client, 4};
  struct bufferevent* bev;
  if (dns == NULL) {
    check("an evdns_base with a hosts file", t, 0);
    return;
  }
  bev = connect_by_name(t, dns, kName);
  if (bev == NULL || await_link(t, &link, bev) != 0) {
    check("a connect by host name is up", t, 0);
    if (bev != NULL) bufferevent_free(bev);
    evdns_base_free(dns, 1);
    return;
  }
  check("a connect by host name is up", t, 1);
  watch(link.client, &client);
  watch(link.server, &server);
  bufferevent_write(link.client, "ping", 4);
  bufferevent_write(link.server, "pong", 4);
  check("bytes go both ways", t, run_until(has_bytes, &ping, 30) && run_until(has_bytes, &pong, 30) &&
                                     read_exactly(&server, (const unsigned char*)"ping", 4) &&
                                     read_exactly(&client, (const unsigned char*)"pong", 4));
  finish(&link, &client, &server);

  bev = connect_by_name(t, dns, "no-such-host.test");
  if (bev != NULL) {
    int error;
    watch(bev, &unknown);
    check("an unknown name ends in an event", t, run_until(has_event, &unknown, 60));
    error = bufferevent_socket_get_dns_error(bev);
    check("BEV_EVENT_ERROR, with a DNS error", t, unknown.event[0] == BEV_EVENT_ERROR && error != 0);
    if (t == TCP)
      tcp_dns_error = error;
    else
      check("the socket's DNS error", t, error == tcp_dns_error);
    printf("  dns error: %s\n", evutil_gai_strerror(error));
    bufferevent_free(bev);
    evbuffer_free(unknown.bytes);
  } else {
    check("a connect to an unknown name starts", t, 0);
  }
  evdns_base_free(dns, 1); /* a lookup left under way fails, as libevent asks of a program */

  if (t == RDMA) {
    char ip[INET_ADDRSTRLEN];
    memset(&link, 0, sizeof link);
    struct sockaddr_in at = listener_address(t);
    inet_ntop(AF_INET, &at.sin_addr, ip, sizeof ip);
    bev = evrdma_bufferevent_connect_hostname(rbase, NULL, AF_UNSPEC, ip, ntohs(at.sin_port), NULL);
    check("a numeric address, evrdma's own resolver: up", t, bev != NULL && await_link(t, &link, bev) == 0);
    if (bev != NULL) bufferevent_free(bev);
    if (link.server != NULL) bufferevent_free(link.server);
  }
}

static int passes;
static void count_pass(evutil_socket_t fd, short what, void* arg) {
  (void)fd;
  (void)what;
  (void)arg;
  ++passes;
}
static int passes_done(void* arg) { return passes >= *(const int*)arg; }

/* An end freed while its name is still being looked up (a name server that never answers) ends
 * quietly: no callback, and freeing the evdns_base afterwards fails no lookup of it (a lookup left
 * behind would call into the freed end). */
static void an_end_freed_while_its_name_is_looked_up_ends_quietly(enum transport t) {
  struct evdns_base* dns = evdns_base_new(base, 0);
  struct seen seen;
  struct bufferevent* bev;
  struct event* pass = event_new(base, -1, EV_PERSIST, count_pass, NULL);
  const struct timeval soon = {0, 1000};
  int enough = 20;
  if (dns == NULL || evdns_base_nameserver_ip_add(dns, "127.0.0.1:9") != 0 || pass == NULL) {
    check("an evdns_base whose name server never answers", t, 0);
    if (dns != NULL) evdns_base_free(dns, 0);
    if (pass != NULL) event_free(pass);
    return;
  }
  bev = connect_by_name(t, dns, "never-answered.test");
  check("the connect starts", t, bev != NULL);
  if (bev != NULL) {
    watch(bev, &seen);
    bufferevent_free(bev);
    passes = 0;
    event_add(pass, &soon);
    run_until(passes_done, &enough, 30); /* the loop turns; nothing of the freed end may run */
    check("no callback of the freed end ran", t, seen.events == 0 && seen.reads == 0);
    evbuffer_free(seen.bytes);
  }
  event_free(pass);
  evdns_base_free(dns, 1); /* fails what lookups are left: none of the freed end's */
  check("the evdns_base is freed", t, 1);
}

const struct test_case names_cases[] = {
    CASE(a_connect_by_host_name_reaches_the_host_and_an_unknown_name_fails_as_libevent_says),
    CASE(an_end_freed_while_its_name_is_looked_up_ends_quietly),
    CASES_END,
};
