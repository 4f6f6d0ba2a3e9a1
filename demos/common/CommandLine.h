// Small command-line helpers shared by the demo programs.
#pragma once

#include <getopt.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace pingpong {

// Every program takes --help as well as -h.
inline const option kLongOptions[] = {{"help", no_argument, nullptr, 'h'}, {nullptr, 0, nullptr, 0}};

// A whole decimal number from 0 to `max` (no sign, no trailing characters).
inline bool parseNumber(const char* text, unsigned long long max, unsigned long long& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(text, &end, 10);
  return errno == 0 && end != text && *end == '\0' && text[0] != '-' && out <= max;
}

// After getopt: says what is wrong and returns false for a bad option value or a stray argument.
inline bool optionsAreGood(const char* prog, bool valueOk, int opt, const char* value) {
  if (!valueOk) std::fprintf(stderr, "%s: bad value '%s' for -%c\n", prog, value, opt);
  return valueOk;
}
// What to add to the strerror of a failed listen() or connect(), if anything helps.
inline const char* setupErrorHint(int rc) {
  switch (rc) {
    case -EADDRINUSE: return " (port in use)";
    case -EINVAL: return " (not a numeric address)";
    case -EADDRNOTAVAIL: return " (not an address of this host)";
    case -ENODEV: return " (no RDMA device: run under tools/rdma-run)";
    default: return "";
  }
}
inline bool noStrayArguments(const char* prog, int optind, int argc, char** argv) {
  if (optind == argc) return true;
  std::fprintf(stderr, "%s: unexpected argument '%s' (see -h)\n", prog, argv[optind]);
  return false;
}

}  // namespace pingpong
