// ConnectionLife: the one internal state of a connection, and the public ConnectionState derived
// from it in one function. Every phase has exactly one public state; the closing phases read as
// Disconnecting and never as open; the ended ones say the outcome.
#include <gtest/gtest.h>

#include "ConnectionLife.h"

namespace {

using evrdma::ConnectionState;
using evrdma::detail::Life;
using evrdma::detail::publicState;

TEST(ConnectionLife, EachOpenPhaseIsItsOwnPublicStateWhateverTheOutcomeSaysSoFar) {
  const std::pair<Life, ConnectionState> open[] = {
      {Life::Idle, ConnectionState::Idle},           {Life::ResolvingAddr, ConnectionState::ResolvingAddr},
      {Life::ResolvingRoute, ConnectionState::ResolvingRoute}, {Life::Connecting, ConnectionState::Connecting},
      {Life::Accepting, ConnectionState::Accepting}, {Life::Established, ConnectionState::Established},
  };
  for (const auto& [life, state] : open) {
    EXPECT_EQ(publicState(life, false), state);
    EXPECT_EQ(publicState(life, true), state);
    EXPECT_FALSE(evrdma::detail::isClosing(life));
  }
}

TEST(ConnectionLife, EveryClosingPhaseReadsAsDisconnectingAndEveryEndedOneAsItsOutcome) {
  for (Life life : {Life::AwaitingEstablished, Life::Disconnecting, Life::FinishScheduled}) {
    EXPECT_TRUE(evrdma::detail::isClosing(life));
    EXPECT_FALSE(evrdma::detail::hasEnded(life));
    EXPECT_EQ(publicState(life, false), ConnectionState::Disconnecting);
    EXPECT_EQ(publicState(life, true), ConnectionState::Disconnecting);
  }
  for (Life life : {Life::Finished, Life::Orphaned}) {
    EXPECT_TRUE(evrdma::detail::isClosing(life));
    EXPECT_TRUE(evrdma::detail::hasEnded(life));
    EXPECT_EQ(publicState(life, false), ConnectionState::Closed);
    EXPECT_EQ(publicState(life, true), ConnectionState::Failed);
  }
}

}  // namespace
