// CmEventQueue: the CM events a Reactor read ahead of their dispatch. An id that goes (destroyed,
// handed away) takes exactly its own waiting events out of dispatch, in any place of the line, and
// an id made later at the same address is not confused with it; a listening id that goes hands
// back the ids of the connect requests waiting for it.
#include <gtest/gtest.h>

#include <vector>

#include "CmEventQueue.h"

namespace {

using evrdma::CmEvent;
using evrdma::detail::CmEventQueue;

rdma_cm_id* fakeId(uintptr_t n) { return reinterpret_cast<rdma_cm_id*>(n * 64); }  // never dereferenced

CmEvent eventOf(rdma_cm_id* id, rdma_cm_event_type type, rdma_cm_id* listenId = nullptr) {
  CmEvent event;
  event.id = id;
  event.type = type;
  event.listenId = listenId;
  return event;
}

size_t forget(CmEventQueue& queue, rdma_cm_id* id) {
  std::vector<rdma_cm_id*> requests;
  const size_t forgotten = queue.forget(id, requests);
  EXPECT_TRUE(requests.empty());
  return forgotten;
}

TEST(CmEventQueue, EventsComeOutOldestFirst) {
  CmEventQueue queue;
  for (uintptr_t n = 1; n <= 3; ++n) queue.push(eventOf(fakeId(n), RDMA_CM_EVENT_DISCONNECTED));
  CmEvent out;
  for (uintptr_t n = 1; n <= 3; ++n) {
    ASSERT_TRUE(queue.pop(out));
    EXPECT_EQ(out.id, fakeId(n));
  }
  EXPECT_FALSE(queue.pop(out));
  EXPECT_EQ(queue.mostWaiting(), 3u);
}

TEST(CmEventQueue, AForgottenIdsEventsComeOutWithoutTheirIdAndNoOtherIsTouched) {
  CmEventQueue queue;
  queue.push(eventOf(fakeId(1), RDMA_CM_EVENT_ESTABLISHED));
  queue.push(eventOf(fakeId(2), RDMA_CM_EVENT_ESTABLISHED));
  queue.push(eventOf(fakeId(1), RDMA_CM_EVENT_DISCONNECTED));
  queue.push(eventOf(fakeId(3), RDMA_CM_EVENT_DISCONNECTED));
  CmEvent out;
  ASSERT_TRUE(queue.pop(out));  // the first of id 1's: dispatched before it went
  EXPECT_EQ(out.id, fakeId(1));
  EXPECT_EQ(forget(queue, fakeId(1)), 1u);  // only its second waits still
  EXPECT_EQ(forget(queue, fakeId(1)), 0u);
  ASSERT_TRUE(queue.pop(out));
  EXPECT_EQ(out.id, fakeId(2));
  ASSERT_TRUE(queue.pop(out));
  EXPECT_EQ(out.id, nullptr);  // id 1's DISCONNECTED keeps its place, without its id
  EXPECT_EQ(out.type, RDMA_CM_EVENT_DISCONNECTED);
  ASSERT_TRUE(queue.pop(out));
  EXPECT_EQ(out.id, fakeId(3));
  EXPECT_EQ(queue.size(), 0u);
}

TEST(CmEventQueue, AnIdMadeAgainAtAForgottenAddressKeepsItsOwnEvents) {
  CmEventQueue queue;
  queue.push(eventOf(fakeId(7), RDMA_CM_EVENT_DISCONNECTED));
  EXPECT_EQ(forget(queue, fakeId(7)), 1u);
  queue.push(eventOf(fakeId(7), RDMA_CM_EVENT_CONNECT_REQUEST));  // the allocator gave the address again
  CmEvent out;
  ASSERT_TRUE(queue.pop(out));
  EXPECT_EQ(out.id, nullptr);
  ASSERT_TRUE(queue.pop(out));
  EXPECT_EQ(out.id, fakeId(7));
  EXPECT_EQ(out.type, RDMA_CM_EVENT_CONNECT_REQUEST);
}

TEST(CmEventQueue, AmongThousandsEachForgottenIdLosesExactlyItsOwnPlace) {
  CmEventQueue queue;
  constexpr uintptr_t kIds = 5000;
  for (uintptr_t n = 1; n <= kIds; ++n) queue.push(eventOf(fakeId(n), RDMA_CM_EVENT_DISCONNECTED));
  CmEvent out;
  ASSERT_TRUE(queue.pop(out));                  // id 1's: dispatched,
  EXPECT_EQ(forget(queue, fakeId(1)), 0u);       // so its destruction finds nothing waiting
  for (uintptr_t n = 2; n <= kIds; n += 2) EXPECT_EQ(forget(queue, fakeId(n)), 1u);
  for (uintptr_t n = 2; n <= kIds; ++n) {
    ASSERT_TRUE(queue.pop(out));
    EXPECT_EQ(out.id, n % 2 == 0 ? nullptr : fakeId(n)) << "place " << n;
  }
  EXPECT_FALSE(queue.pop(out));
}

TEST(CmEventQueue, AListeningIdThatGoesHandsBackTheNewIdsOfTheRequestsWaitingForIt) {
  CmEventQueue queue;
  rdma_cm_id* listening = fakeId(1);
  queue.push(eventOf(fakeId(10), RDMA_CM_EVENT_CONNECT_REQUEST, listening));
  queue.push(eventOf(fakeId(2), RDMA_CM_EVENT_DISCONNECTED));  // another connection's
  queue.push(eventOf(fakeId(11), RDMA_CM_EVENT_CONNECT_REQUEST, listening));
  queue.push(eventOf(fakeId(11), RDMA_CM_EVENT_REJECTED));  // that client gave up meanwhile
  CmEvent out;
  ASSERT_TRUE(queue.pop(out));  // the first request was dispatched: its id is the listener's business
  EXPECT_EQ(out.id, fakeId(10));
  std::vector<rdma_cm_id*> requests;
  EXPECT_EQ(queue.forget(listening, requests), 1u);
  EXPECT_EQ(requests, std::vector<rdma_cm_id*>{fakeId(11)});
  EXPECT_EQ(forget(queue, fakeId(11)), 1u);  // destroying it takes its REJECTED too
  ASSERT_TRUE(queue.pop(out));
  EXPECT_EQ(out.id, fakeId(2));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(queue.pop(out));
    EXPECT_EQ(out.id, nullptr);
  }
  EXPECT_FALSE(queue.pop(out));
}

TEST(CmEventQueue, ARequestWhoseOwnIdWentIsNoLongerTheListenersToHandBack) {
  CmEventQueue queue;
  rdma_cm_id* listening = fakeId(1);
  queue.push(eventOf(fakeId(10), RDMA_CM_EVENT_CONNECT_REQUEST, listening));
  EXPECT_EQ(forget(queue, fakeId(10)), 1u);
  std::vector<rdma_cm_id*> requests;
  EXPECT_EQ(queue.forget(listening, requests), 0u);
  EXPECT_TRUE(requests.empty());
}

}  // namespace
