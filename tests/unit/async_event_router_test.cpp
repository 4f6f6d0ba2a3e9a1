// AsyncEventRouter: an async event read by one Reactor's dispatcher goes to the Reactor that owns
// the QP or CQ it is about; device-wide events go to every Reactor on the device. Pure logic.
#include "AsyncEventRouter.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using evrdma::detail::AsyncEventCopy;
using evrdma::detail::AsyncEventRouter;

struct Inbox : evrdma::detail::AsyncInbox {
  std::vector<AsyncEventCopy> got;
  void post(const AsyncEventCopy& event) noexcept override { got.push_back(event); }
};

ibv_context* context(uintptr_t n) { return reinterpret_cast<ibv_context*>(n); }
ibv_cq* cq(uintptr_t n) { return reinterpret_cast<ibv_cq*>(n); }

AsyncEventCopy qpEvent(uint32_t qpNum) {
  AsyncEventCopy e;
  e.type = IBV_EVENT_QP_FATAL;
  e.qpNum = qpNum;
  return e;
}

TEST(AsyncEventRouter, AnEventAboutAnotherReactorsQpGoesToThatReactor) {
  AsyncEventRouter& router = AsyncEventRouter::instance();
  Inbox a, b;
  router.addInbox(context(1), &a);
  router.addInbox(context(1), &b);
  router.ownQp(7, context(1), &b);
  router.ownQp(8, context(1), &a);
  EXPECT_TRUE(router.forward(context(1), &a, qpEvent(7)));  // read by A, B's QP
  ASSERT_EQ(b.got.size(), 1u);
  EXPECT_EQ(b.got[0].qpNum, 7u);
  EXPECT_FALSE(router.forward(context(1), &a, qpEvent(8)));  // A's own: A handles it
  EXPECT_FALSE(router.forward(context(1), &a, qpEvent(99)));  // nobody's (destroyed): dropped by A
  EXPECT_FALSE(router.forward(context(2), &a, qpEvent(7)));  // same number on another device: not B's
  EXPECT_TRUE(a.got.empty());
  EXPECT_EQ(b.got.size(), 1u);
  router.removeInbox(&a);
  router.removeInbox(&b);
}

TEST(AsyncEventRouter, ACqErrorGoesToTheCqsOwnerAndDeviceFatalToEveryone) {
  AsyncEventRouter& router = AsyncEventRouter::instance();
  Inbox a, b, other;
  router.addInbox(context(3), &a);
  router.addInbox(context(3), &b);
  router.addInbox(context(4), &other);
  router.ownCq(cq(100), &b);
  AsyncEventCopy cqError;
  cqError.type = IBV_EVENT_CQ_ERR;
  cqError.cq = cq(100);
  EXPECT_TRUE(router.forward(context(3), &a, cqError));
  ASSERT_EQ(b.got.size(), 1u);
  AsyncEventCopy fatal;
  fatal.type = IBV_EVENT_DEVICE_FATAL;
  EXPECT_FALSE(router.forward(context(3), &a, fatal));  // A handles it itself...
  ASSERT_EQ(b.got.size(), 2u);                          // ...and B hears it too
  EXPECT_EQ(b.got[1].type, IBV_EVENT_DEVICE_FATAL);
  EXPECT_TRUE(a.got.empty());
  EXPECT_TRUE(other.got.empty());  // another device
  router.removeInbox(&a);
  router.removeInbox(&b);
  router.removeInbox(&other);
}

TEST(AsyncEventRouter, ARemovedInboxGetsNothingMore) {
  AsyncEventRouter& router = AsyncEventRouter::instance();
  Inbox a, b;
  router.addInbox(context(5), &a);
  router.addInbox(context(5), &b);
  router.ownQp(9, context(5), &b);
  router.removeInbox(&b);  // B's Reactor is gone (its QPs with it)
  EXPECT_FALSE(router.forward(context(5), &a, qpEvent(9)));
  EXPECT_TRUE(b.got.empty());
  router.removeInbox(&a);
}

}  // namespace
