/// \file
/// Numeric socket addresses only: resolving a host name (getaddrinfo) can block the loop.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace evrdma {

/// Fills `out` from a numeric IPv4 or IPv6 address and a port. Returns 0, or -EINVAL (with a
/// host name, an empty string or garbage).
int parseAddress(const std::string& address, uint16_t port, sockaddr_storage& out) noexcept;
/// "192.0.2.1:12321" / "[fe80::1]:12321"; "?" for anything else.
std::string formatAddress(const sockaddr* address);
/// The length of an AF_INET or AF_INET6 address (for bind, connect, a callback's socklen); 0 for
/// another family or null.
socklen_t addressLength(const sockaddr* address) noexcept;

}  // namespace evrdma
