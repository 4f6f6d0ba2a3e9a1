// An echo agent, its factory and a client that sends one message at a time: what the tests of the
// embedding kit and of adaptive polling drive their connections with.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/Client.h"
#include "evrdma/Connection.h"
#include "evrdma/Listener.h"
#include "evrdma/Watch.h"

namespace evrdma::test {

// Echoes every message (after `delay`, when set: one message at a time); remembers how it ended.
struct Echo : evrdma::ConnectionHandler {
  int* errors = nullptr;
  std::string* lastError = nullptr;
  std::chrono::milliseconds delay{0};
  std::unique_ptr<evrdma::Timer> delayed;
  std::vector<uint8_t> waiting;
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
    if (delay.count() == 0) {
      (void)c.postSend(data, length);
      return;
    }
    waiting.assign(data, data + length);
    if (!delayed) delayed = std::make_unique<evrdma::Timer>(c.reactor(), [this, &c] { (void)c.postSend(waiting.data(), waiting.size()); });
    delayed->startOnce(delay);
  }
  void onError(evrdma::Connection&, int err, const char* op) noexcept override {
    if (errors) *errors = err;
    if (lastError) *lastError = op;
  }
};

struct EchoFactory : evrdma::AgentFactory {
  evrdma::ConnectionOptions options;
  int lastAgentError = 0;
  std::string lastAgentOp;
  std::string rejectWith;  // non-empty: reject every request with this reason
  std::chrono::milliseconds echoDelay{0};  // each echo goes this long after its message came
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    if (!rejectWith.empty()) return evrdma::AcceptDecision::reject(rejectWith);
    auto echo = std::make_unique<Echo>();
    echo->errors = &lastAgentError;
    echo->lastError = &lastAgentOp;
    echo->delay = echoDelay;
    return evrdma::AcceptDecision::accept(std::move(echo), options);
  }
};

// Sends `count` messages one after another (the next once the echo is back), then idles or closes.
struct Sender : evrdma::ConnectionHandler {
  int count = 0, echoed = 0;
  bool closeWhenDone = true, established = false, closed = false;
  int error = 0;
  std::string op;
  void onEstablished(evrdma::Connection& c) noexcept override {
    established = true;
    next(c);
  }
  void onRecv(evrdma::Connection& c, const uint8_t*, size_t) noexcept override {
    ++echoed;
    next(c);
  }
  void next(evrdma::Connection& c) {
    if (echoed < count) {
      (void)c.postSend("ping", 4);
    } else if (closeWhenDone) {
      c.close();
    }
  }
  void onError(evrdma::Connection&, int err, const char* what) noexcept override {
    error = err;
    op = what;
  }
  void onClosed(evrdma::Connection&) noexcept override { closed = true; }
};

inline evrdma::ClientOptions framedClient() {
  evrdma::ClientOptions options;
  options.framed = true;
  options.maxMessageSize = 256;
  return options;
}

}  // namespace evrdma::test
