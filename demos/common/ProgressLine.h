// A server's progress, a line a second: how many agents it holds, how many came and went in that
// second, its CPU use in it, and the loop's longest stall in it: how late a 10 ms timer fired at
// worst, and how much CPU the loop's thread used between two of its ticks at most. A stall with
// little CPU in it is the thread waiting (descheduled, or blocked in a call); one with as much CPU
// is a long turn of its own. For watching thousands of agents connect, sit idle and close
// (demos/scale), where a total at the end hides when it slowed.
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>

#include "Figures.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"

namespace pingpong {

class ProgressLine {
 public:
  // `agents` reads how many agents there are now (called on the loop, once a second).
  ProgressLine(evrdma::Reactor& reactor, const char* program, std::function<size_t()> agents)
      : program_(program), agents_(std::move(agents)), second_(reactor, [this] { print(); }),
        probe_(reactor, [this] { noteProbe(); }) {}

  int start() {
    started_ = lastProbe_ = lastLine_ = Clock::now();
    lastProbeCpu_ = threadCpu();
    getrusage(RUSAGE_SELF, &lastUsage_);
    if (int rc = probe_.startPeriodic(kProbe); rc != 0) return rc;
    return second_.startPeriodic(std::chrono::seconds(1));
  }
  std::chrono::microseconds longestStall() const noexcept { return longestEver_; }
  // The most CPU the loop's thread used between two ticks of the 10 ms timer (its longest turn, or
  // turns back to back, plus the tick's 10 ms at most).
  std::chrono::microseconds mostCpuBetweenTicks() const noexcept { return mostCpuEver_; }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kProbe{10};

  static std::chrono::microseconds threadCpu() noexcept {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return std::chrono::seconds(t.tv_sec) + std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::nanoseconds(t.tv_nsec));
  }

  void noteProbe() {
    const Clock::time_point now = Clock::now();
    const std::chrono::microseconds cpu = threadCpu();
    const auto late = std::chrono::duration_cast<std::chrono::microseconds>(now - lastProbe_ - kProbe);
    const auto used = cpu - lastProbeCpu_;
    lastProbe_ = now;
    lastProbeCpu_ = cpu;
    longestThisSecond_ = std::max(longestThisSecond_, late);
    longestEver_ = std::max(longestEver_, late);
    mostCpuThisSecond_ = std::max(mostCpuThisSecond_, used);
    mostCpuEver_ = std::max(mostCpuEver_, used);
  }

  void print() {
    const Clock::time_point now = Clock::now();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double wall = std::chrono::duration<double>(now - lastLine_).count();
    const size_t agents = agents_();
    std::printf("%s: progress at %.0f s: %zu agents (%+lld in %.2f s), cpu user %.0f%% system %.0f%%, the loop's "
                "longest stall %.1f ms (the most CPU between two 10 ms ticks %.1f ms)\n",
                program_, std::chrono::duration<double>(now - started_).count(), agents,
                static_cast<long long>(agents) - static_cast<long long>(lastAgents_), wall,
                wall > 0 ? 100 * secondsBetween(lastUsage_.ru_utime, usage.ru_utime) / wall : 0.0,
                wall > 0 ? 100 * secondsBetween(lastUsage_.ru_stime, usage.ru_stime) / wall : 0.0,
                static_cast<double>(longestThisSecond_.count()) / 1000,
                static_cast<double>(mostCpuThisSecond_.count()) / 1000);
    lastAgents_ = agents;
    lastUsage_ = usage;
    lastLine_ = now;
    longestThisSecond_ = mostCpuThisSecond_ = std::chrono::microseconds(0);
  }

  const char* program_;
  std::function<size_t()> agents_;
  evrdma::Timer second_, probe_;
  Clock::time_point started_, lastProbe_, lastLine_;
  rusage lastUsage_{};
  size_t lastAgents_ = 0;
  std::chrono::microseconds lastProbeCpu_{0};
  std::chrono::microseconds longestThisSecond_{0}, longestEver_{0}, mostCpuThisSecond_{0}, mostCpuEver_{0};
};

}  // namespace pingpong
