// setNonBlocking (Verbs.h): a read on an empty pipe returns EAGAIN instead of blocking; a bad fd is
// -EBADF.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>

#include "evrdma/Verbs.h"

namespace {

TEST(SetNonBlocking, MakesAReadOnAnEmptyPipeReturnEagainInsteadOfBlocking) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(evrdma::setNonBlocking(fds[0]), 0);
  EXPECT_TRUE(fcntl(fds[0], F_GETFL) & O_NONBLOCK);
  char byte;
  EXPECT_EQ(read(fds[0], &byte, 1), -1);
  EXPECT_EQ(errno, EAGAIN);
  close(fds[0]);
  close(fds[1]);
}

TEST(SetNonBlocking, ReportsABadDescriptorAsMinusErrno) {
  EXPECT_EQ(evrdma::setNonBlocking(-1), -EBADF);
}

}  // namespace
