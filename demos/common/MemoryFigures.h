// What a server's memory holds, by category, read from the process itself: the heap in use
// (malloc), memory pinned for RDMA (VmPin), the provider's queues mapped into the process (the
// uverbs device's mappings: rxe and siw put each QP's and CQ's rings there) and the RSS. Sampled
// idle and at the most agents, the difference per agent is what one agent costs.
#pragma once

#include <malloc.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace pingpong {

struct MemorySample {
  size_t agents = 0;
  uint64_t heap = 0, pinned = 0, queues = 0, rss = 0;  // bytes
};

inline MemorySample sampleMemory(size_t agents) {
  MemorySample sample;
  sample.agents = agents;
  sample.heap = mallinfo2().uordblks;
  char line[512];
  if (FILE* f = std::fopen("/proc/self/status", "re")) {
    while (std::fgets(line, sizeof line, f) != nullptr) {
      unsigned long long kib = 0;
      if (std::sscanf(line, "VmPin: %llu kB", &kib) == 1) sample.pinned = kib * 1024;
      if (std::sscanf(line, "VmRSS: %llu kB", &kib) == 1) sample.rss = kib * 1024;
    }
    std::fclose(f);
  }
  if (FILE* f = std::fopen("/proc/self/maps", "re")) {
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strstr(line, "/dev/infiniband/uverbs") == nullptr) continue;
      unsigned long long from = 0, to = 0;
      if (std::sscanf(line, "%llx-%llx", &from, &to) == 2) sample.queues += to - from;
    }
    std::fclose(f);
  }
  return sample;
}

// Keeps the idle sample and the one at the most agents.
class MemoryFigures {
 public:
  void idle() { idle_ = sampleMemory(0); }
  // Call once a second. Samples past the peak seen so far, once the count held still since the
  // last call, or doubled: a sample reads /proc/self/maps, a line per queue mapped (100 000 agents:
  // a second of the loop in an emulated guest), so not every second while thousands connect.
  void agents(size_t count) {
    const bool steady = count == lastCount_, doubled = count >= 2 * peak_.agents + 64;
    lastCount_ = count;
    if (count > peak_.agents && (steady || doubled)) peak_ = sampleMemory(count);
  }
  std::string describe() const {
    if (peak_.agents == 0) return "no agents";
    auto per = [&](uint64_t at, uint64_t before) {
      return at > before ? (at - before) / 1024.0 / static_cast<double>(peak_.agents) : 0.0;
    };
    char text[400];
    std::snprintf(text, sizeof text,
                  "memory per agent at the most agents (%zu), against idle: heap %.2f KiB, pinned %.2f KiB, "
                  "provider queues %.2f KiB, RSS %.2f KiB",
                  peak_.agents, per(peak_.heap, idle_.heap), per(peak_.pinned, idle_.pinned),
                  per(peak_.queues, idle_.queues), per(peak_.rss, idle_.rss));
    return text;
  }

 private:
  MemorySample idle_, peak_;
  size_t lastCount_ = 0;
};

}  // namespace pingpong
