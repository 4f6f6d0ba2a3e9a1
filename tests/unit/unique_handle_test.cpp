// UniqueHandle: its object destroyed exactly once, through scope, moves, release and reset.
#include "evrdma/UniqueHandle.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

struct Fake {
  int id;
};

std::vector<int> destroyed;  // ids, in destruction order

struct FakeDeleter {
  int operator()(Fake* f) const noexcept {
    destroyed.push_back(f->id);
    return f->id < 0 ? -16 /* -EBUSY */ : 0;
  }
};

using FakeHandle = evrdma::UniqueHandle<Fake, FakeDeleter>;

class UniqueHandleTest : public ::testing::Test {
 protected:
  void SetUp() override { destroyed.clear(); }
};

TEST_F(UniqueHandleTest, DestroysItsObjectExactlyOnceWhenItGoesOutOfScope) {
  Fake a{1};
  { FakeHandle h(&a); }
  EXPECT_EQ(destroyed, std::vector<int>{1});
}

TEST_F(UniqueHandleTest, EmptyHandleDestroysNothing) {
  { FakeHandle h; EXPECT_FALSE(h); }
  EXPECT_TRUE(destroyed.empty());
}

TEST_F(UniqueHandleTest, MoveTransfersOwnershipWithoutDestroying) {
  Fake a{1};
  FakeHandle h1(&a);
  FakeHandle h2(std::move(h1));
  EXPECT_FALSE(h1);  // NOLINT(bugprone-use-after-move): the moved-from state is what we test
  EXPECT_EQ(h2.get(), &a);
  EXPECT_TRUE(destroyed.empty());
  h2.reset();
  EXPECT_EQ(destroyed, std::vector<int>{1});
}

TEST_F(UniqueHandleTest, MoveAssignmentDestroysTheObjectItReplaces) {
  Fake a{1}, b{2};
  FakeHandle h1(&a), h2(&b);
  h1 = std::move(h2);
  EXPECT_EQ(destroyed, std::vector<int>{1});
  EXPECT_EQ(h1.get(), &b);
}

TEST_F(UniqueHandleTest, ReleaseGivesUpOwnership) {
  Fake a{1};
  FakeHandle h(&a);
  EXPECT_EQ(h.release(), &a);
  h.reset();
  EXPECT_TRUE(destroyed.empty());
}

TEST_F(UniqueHandleTest, ResetReportsTheDeletersError) {
  Fake busy{-1};
  FakeHandle h(&busy);
  EXPECT_EQ(h.reset(), -16);
  EXPECT_EQ(h.reset(), 0);  // already empty: nothing more to destroy
  EXPECT_EQ(destroyed, std::vector<int>{-1});
}

}  // namespace
