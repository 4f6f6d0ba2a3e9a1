// Ring: the FIFO behind send backlogs and the dispatcher's ready list (and a CQ taken out of it).
#include "Ring.h"

#include <gtest/gtest.h>

#include <memory>

namespace {

using evrdma::detail::Ring;

TEST(RingTest, KeepsFirstInFirstOutWhenItGrowsWhileWrappedAround) {
  Ring<int> ring;
  int next = 0, expected = 0;
  for (int i = 0; i < 6; ++i) ring.push_back(next++);
  for (int i = 0; i < 5; ++i) {  // the head is now past the start of the storage
    ASSERT_EQ(ring.front(), expected++);
    ring.pop_front();
  }
  for (int i = 0; i < 40; ++i) ring.push_back(next++);  // grows twice, wrapped
  ASSERT_EQ(ring.size(), 41u);
  for (size_t i = 0; i < ring.size(); ++i) ASSERT_EQ(ring[i], expected + static_cast<int>(i));
  while (!ring.empty()) {
    ASSERT_EQ(ring.front(), expected++);
    ring.pop_front();
  }
  EXPECT_EQ(expected, next);
}

TEST(RingTest, APoppedOrClearedElementLetsGoOfWhatItHeld) {
  auto held = std::make_shared<int>(7);
  Ring<std::shared_ptr<int>> ring;
  ring.push_back(held);
  ring.push_back(held);
  ring.push_back(held);
  EXPECT_EQ(held.use_count(), 4);
  ring.pop_front();
  EXPECT_EQ(held.use_count(), 3) << "popped, not kept until the slot is reused";
  ring.clear();
  EXPECT_EQ(held.use_count(), 1);
  EXPECT_TRUE(ring.empty());
  ring.push_back(held);
  EXPECT_EQ(*ring.front(), 7) << "usable after clear";
}

TEST(RingTest, RemovingAnElementKeepsTheOthersInTheirOrder) {
  Ring<int> ring;
  for (int i = 0; i < 5; ++i) ring.push_back(i);
  ring.pop_front();  // wrapped storage: the head is past the start
  for (int i = 5; i < 10; ++i) ring.push_back(i);
  ring.remove(3);
  ring.remove(42);  // absent: nothing changes
  const int expected[] = {1, 2, 4, 5, 6, 7, 8, 9};
  ASSERT_EQ(ring.size(), 8u);
  for (size_t i = 0; i < ring.size(); ++i) EXPECT_EQ(ring[i], expected[i]);
}

}  // namespace
