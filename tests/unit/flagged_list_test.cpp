// FlaggedList: an object is in the list at most once, and its flag always says whether it is.
#include <gtest/gtest.h>

#include "FlaggedList.h"

namespace {

struct Item {
  int name = 0;
  bool listed = false;
};
using List = evrdma::detail::FlaggedList<Item, &Item::listed>;

TEST(FlaggedList, AnItemAddedTwiceIsInOnceAndTheBackIsTheLastAdded) {
  Item a{1}, b{2};
  List list;
  list.add(&a);
  list.add(&b);
  list.add(&a);
  ASSERT_EQ(list.back(), &b);
  list.popBack();
  EXPECT_FALSE(b.listed);
  ASSERT_EQ(list.back(), &a);
  list.popBack();
  EXPECT_FALSE(a.listed);
  EXPECT_TRUE(list.empty());
}

TEST(FlaggedList, RemovingOrClearingLowersTheFlagsSoTheItemsCanComeBack) {
  Item a{1}, b{2}, c{3};
  List list;
  list.add(&a);
  list.add(&b);
  list.add(&c);
  list.remove(&b);
  list.remove(&b);  // not in: nothing happens
  EXPECT_FALSE(b.listed);
  EXPECT_EQ(list.back(), &c);
  list.clear();
  EXPECT_TRUE(list.empty());
  EXPECT_FALSE(a.listed || c.listed);
  list.add(&a);
  EXPECT_TRUE(a.listed);
  EXPECT_EQ(list.back(), &a);
}

}  // namespace
