// BuffereventView: the three fields a stream reads on every message (enabled, the read high
// watermark, the read callback) are read in place of their getters only where the library's
// layout was found to agree; each read says what the getter says, read either way.
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <gtest/gtest.h>

#include "BuffereventView.h"

namespace {

namespace bev = evrdma::detail::bev;

void someRead(bufferevent*, void*) {}

// Every read of `end` through the view against libevent's getters.
void expectReadsMatchGetters(bufferevent* end, bool fields) {
  size_t low = 0, high = 0;
  bufferevent_getwatermark(end, EV_READ, &low, &high);
  bufferevent_data_cb readcb = nullptr;
  bufferevent_getcb(end, &readcb, nullptr, nullptr, nullptr);
  EXPECT_EQ(bev::readEnabled(end, fields), (bufferevent_get_enabled(end) & EV_READ) != 0);
  EXPECT_EQ(bev::writeEnabled(end, fields), (bufferevent_get_enabled(end) & EV_WRITE) != 0);
  EXPECT_EQ(bev::readHighWatermark(end, fields), high);
  EXPECT_EQ(bev::hasReadCallback(end, fields), readcb != nullptr);
}

TEST(BuffereventView, TheFieldsAgreeWithTheGettersHereAndEveryReadSaysWhatItsGetterSaysEitherWay) {
  event_base* base = event_base_new();
  ASSERT_NE(base, nullptr);
  ASSERT_TRUE(bev::fieldsAgree(base)) << "Debian 12's libevent 2.1: its fields are read";
  bufferevent* pair[2] = {nullptr, nullptr};
  ASSERT_EQ(bufferevent_pair_new(base, 0, pair), 0);
  bufferevent* end = pair[0];
  for (bool fields : {true, false}) {
    SCOPED_TRACE(fields ? "fields" : "getters");
    bufferevent_disable(end, EV_READ | EV_WRITE);
    bufferevent_setcb(end, nullptr, nullptr, nullptr, nullptr);
    bufferevent_setwatermark(end, EV_READ, 0, 0);
    expectReadsMatchGetters(end, fields);
    EXPECT_FALSE(bev::readEnabled(end, fields));
    bufferevent_enable(end, EV_READ);
    bufferevent_setcb(end, someRead, nullptr, nullptr, nullptr);
    bufferevent_setwatermark(end, EV_READ, 10, 4096);
    expectReadsMatchGetters(end, fields);
    EXPECT_TRUE(bev::readEnabled(end, fields));
    EXPECT_FALSE(bev::writeEnabled(end, fields));
    EXPECT_EQ(bev::readHighWatermark(end, fields), 4096u);
    EXPECT_TRUE(bev::hasReadCallback(end, fields));
  }
  bufferevent_free(pair[0]);
  bufferevent_free(pair[1]);
  event_base_free(base);
}

}  // namespace
