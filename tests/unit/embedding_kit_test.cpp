// The embedding kit's pure logic, without a device: the log hook's levels, the liveness options'
// checks, a ReconnectingClient that refuses input no retry would fix, and the Reactor's snapshot.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "Logging.h"
#include "evrdma/Log.h"
#include "evrdma/Reactor.h"
#include "evrdma/ReconnectingClient.h"

namespace {

using namespace std::chrono_literals;

// Collects what the library reports; turns reporting off again when it goes.
struct LogRecord {
  std::vector<std::pair<evrdma::LogLevel, std::string>> messages;
  explicit LogRecord(evrdma::LogLevel minimum) {
    evrdma::setLogCallback(minimum, [this](evrdma::LogLevel level, const char* message) {
      messages.emplace_back(level, message);
    });
  }
  ~LogRecord() { evrdma::setLogCallback(evrdma::LogLevel::Off, nullptr); }
};

TEST(Log, OnlyMessagesAtOrAboveTheChosenLevelReachTheCallback) {
  LogRecord record(evrdma::LogLevel::Warn);
  EVRDMA_LOG(evrdma::LogLevel::Info, "not wanted %d", 1);
  EVRDMA_LOG(evrdma::LogLevel::Warn, "wanted %d", 2);
  EVRDMA_LOG(evrdma::LogLevel::Error, "wanted %s", "too");
  ASSERT_EQ(record.messages.size(), 2u);
  EXPECT_EQ(record.messages[0].first, evrdma::LogLevel::Warn);
  EXPECT_EQ(record.messages[0].second, "wanted 2");
  EXPECT_EQ(record.messages[1].second, "wanted too");
}

TEST(Log, NothingIsReportedOnceTheCallbackIsRemoved) {
  std::vector<std::string> heard;
  evrdma::setLogCallback(evrdma::LogLevel::Debug, [&](evrdma::LogLevel, const char* m) { heard.emplace_back(m); });
  EVRDMA_LOG(evrdma::LogLevel::Debug, "one");
  evrdma::setLogCallback(evrdma::LogLevel::Debug, nullptr);
  EVRDMA_LOG(evrdma::LogLevel::Error, "two");
  EXPECT_FALSE(evrdma::detail::logWanted(evrdma::LogLevel::Error));
  EXPECT_EQ(heard, std::vector<std::string>{"one"});
}

TEST(Log, AReconnectingClientGivenABadAddressRefusesAtOnceAndSaysWhyInTheLog) {
  LogRecord record(evrdma::LogLevel::Info);
  evrdma::Reactor reactor;
  int handlers = 0;
  evrdma::ReconnectingClient client(reactor, [&] {
    ++handlers;
    return std::unique_ptr<evrdma::ConnectionHandler>();
  });
  EXPECT_EQ(client.start("not-an-address", 7475), -EINVAL);
  EXPECT_EQ(client.client(), nullptr);
  EXPECT_EQ(client.attempts(), 0u) << "nothing was attempted";
  ASSERT_EQ(record.messages.size(), 1u);
  EXPECT_EQ(record.messages[0].first, evrdma::LogLevel::Info);
  EXPECT_NE(record.messages[0].second.find("not-an-address"), std::string::npos) << record.messages[0].second;
}

TEST(LivenessOptions, KeepaliveNeedsAFramedConnectionAndATimeoutNoShorterThanItsInterval) {
  const char* problem = nullptr;
  evrdma::ConnectionOptions options;
  options.keepaliveInterval = 100ms;
  EXPECT_EQ(evrdma::checkOptions(options, problem), -EINVAL);
  EXPECT_NE(std::string(problem).find("framed"), std::string::npos);
  options.framed = true;
  EXPECT_EQ(evrdma::checkOptions(options, problem), 0);
  options.keepaliveTimeout = 50ms;
  EXPECT_EQ(evrdma::checkOptions(options, problem), -EINVAL);
  options.keepaliveTimeout = 300ms;
  EXPECT_EQ(evrdma::checkOptions(options, problem), 0);
  options.keepaliveInterval = 0ms;
  EXPECT_EQ(evrdma::checkOptions(options, problem), -EINVAL) << "a timeout without probes";
  evrdma::ConnectionOptions idle;
  idle.idleTimeout = 1000ms;
  EXPECT_EQ(evrdma::checkOptions(idle, problem), 0) << "an idle timeout needs no frames";
  idle.idleTimeout = -1ms;
  EXPECT_EQ(evrdma::checkOptions(idle, problem), -EINVAL);
}

TEST(LendingOptions, LendingIsOffByDefaultAndALenderHasItsOwnProtectionDomainWhichASharedReceiveQueueCannotServe) {
  const char* problem = nullptr;
  evrdma::ConnectionOptions options;
  options.framed = true;
  EXPECT_EQ(options.maxLentBytes, 0u) << "a connection lends nothing unless the application says so";
  EXPECT_FALSE(evrdma::usesOwnProtectionDomain(options));
  options.lendingPoolBytes = 4096;
  EXPECT_EQ(evrdma::checkOptions(options, problem), -EINVAL) << "a pool that lends nothing";
  options.maxLentBytes = 4096;
  EXPECT_EQ(evrdma::checkOptions(options, problem), 0);
  EXPECT_TRUE(evrdma::usesOwnProtectionDomain(options));
  options.sharedReceiveQueue = true;
  EXPECT_EQ(evrdma::checkOptions(options, problem), -EINVAL);
  EXPECT_NE(std::string(problem).find("sharedReceiveQueue"), std::string::npos) << problem;
  evrdma::ConnectionOptions offers;
  offers.ownProtectionDomain = true;
  EXPECT_TRUE(evrdma::usesOwnProtectionDomain(offers));
  offers.sharedReceiveQueue = true;
  EXPECT_EQ(evrdma::checkOptions(offers, problem), -EINVAL);
}

TEST(ReactorStats, AFreshReactorsSnapshotHasNoDeviceNoConnectionAndItsBudget) {
  evrdma::Reactor reactor;
  reactor.setMemoryBudget(1 << 20);
  const evrdma::ReactorStats stats = reactor.stats();
  EXPECT_TRUE(stats.devices.empty());
  EXPECT_EQ(stats.connections.total(), 0u);
  EXPECT_EQ(stats.memoryBudget, uint64_t{1} << 20);
  EXPECT_EQ(stats.cmEvents.dispatched, 0u);
}

}  // namespace
