// BuffereventView: the three fields a stream reads on every message (enabled, the read high
// watermark, the read callback) are read in place of their getters only where the library's
// layout was found to agree; each read says what the getter says, read either way. And a run of an
// end's deferred callbacks taken off the base, so that event_base_free with no loop turn before
// it frees the end (it drops a scheduled run unrun, with the reference the run holds).
#include <event2/buffer.h>
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

struct HookSeen {
  int enables = 0;  // our callback, for the mark
  int timeouts = 0;  // the program's event callback, BEV_EVENT_TIMEOUT | BEV_EVENT_WRITING
  event_callback_fn own = nullptr;
  void* ownArg = nullptr;
  bufferevent* end = nullptr;
};

void onHookedWriteEvent(evutil_socket_t fd, short what, void* arg) {
  auto* seen = static_cast<HookSeen*>(arg);
  if (bev::firedForEnableMark(seen->end))
    ++seen->enables;
  else
    seen->own(fd, what, seen->ownArg);  // as the stream does: the program's timeout ran out
}

void onEndEvent(bufferevent*, short what, void* arg) {
  if (what == (BEV_EVENT_TIMEOUT | BEV_EVENT_WRITING)) ++static_cast<HookSeen*>(arg)->timeouts;
}

// Runs `base` until `done`, a pass at a time (a deadline of 10 s bounds a hang).
template <typename Done>
bool runUntil(event_base* base, Done done) {
  timeval tenMs{0, 10000};
  for (int pass = 0; pass < 1000 && !done(); ++pass) {
    event_base_loopexit(base, &tenMs);
    event_base_loop(base, EVLOOP_ONCE);
  }
  return done();
}

// A filter's bufferevent_enable(EV_WRITE) reaches whoever owns its write-timeout event once it is
// hooked (that is how a stream hears of it), and a write timeout the program sets still runs as
// libevent's own, its event callback told BEV_EVENT_TIMEOUT | BEV_EVENT_WRITING.
TEST(BuffereventView, AHookedFilterTellsOfWritingEnabledAgainAndTheProgramsOwnWriteTimeoutStillRuns) {
  event_base* base = event_base_new();
  ASSERT_NE(base, nullptr);
  ASSERT_TRUE(bev::fieldsAgree(base));
  bufferevent* pair[2] = {nullptr, nullptr};
  ASSERT_EQ(bufferevent_pair_new(base, 0, pair), 0);
  bufferevent* end = bufferevent_filter_new(pair[0], nullptr, nullptr, BEV_OPT_CLOSE_ON_FREE, nullptr, nullptr);
  ASSERT_NE(end, nullptr);
  HookSeen seen;
  seen.end = end;
  ASSERT_TRUE(bev::hookWriteEnable(end, onHookedWriteEvent, &seen, seen.own, seen.ownArg));
  EXPECT_FALSE(bev::hasWriteTimeout(end)) << "the mark is no timeout of the program's";
  bufferevent_setcb(end, nullptr, nullptr, onEndEvent, &seen);

  bufferevent_disable(end, EV_WRITE);
  bufferevent_enable(end, EV_WRITE);
  EXPECT_TRUE(runUntil(base, [&] { return seen.enables == 1; })) << seen.enables;

  const timeval fiftyMs{0, 50000};
  bufferevent_set_timeouts(end, nullptr, &fiftyMs);
  EXPECT_TRUE(bev::hasWriteTimeout(end));
  bufferevent_disable(end, EV_WRITE);
  bufferevent_enable(end, EV_WRITE);  // the program's timeout starts
  EXPECT_TRUE(runUntil(base, [&] { return seen.timeouts == 1; })) << seen.timeouts;
  EXPECT_EQ(seen.enables, 1);

  bufferevent_set_timeouts(end, nullptr, nullptr);
  bev::keepEnableMark(end);  // as the stream's pump does
  bufferevent_enable(end, EV_WRITE);  // disabled by the timeout
  EXPECT_TRUE(runUntil(base, [&] { return seen.enables == 2; })) << seen.enables;
  bufferevent_free(end);
  bufferevent_free(pair[1]);
  event_base_free(base);
}

// The rate-limit figures read from the fields say what libevent's getters say, on an end without
// a rate limit (its max_single_read / _write) and with one, alone and in a group; what is charged
// is charged only where a limit is set.
TEST(BuffereventView, RateLimitFiguresReadFromTheFieldsSayWhatLibeventsGettersSay) {
  event_base* base = event_base_new();
  ASSERT_NE(base, nullptr);
  ASSERT_TRUE(bev::fieldsAgree(base));
  bufferevent* pair[2] = {nullptr, nullptr};
  ASSERT_EQ(bufferevent_pair_new(base, 0, pair), 0);
  bufferevent* end = pair[0];
  EXPECT_EQ(bev::readAllowance(end, true), bufferevent_get_max_to_read(end));
  EXPECT_EQ(bev::writeAllowance(end, true), bufferevent_get_max_to_write(end));
  EXPECT_FALSE(bev::limitBinds(bev::readAllowance(end, true)));
  bufferevent_set_max_single_read(end, 4096);
  EXPECT_EQ(bev::readAllowance(end, true), 4096) << "a program that lowered it is held to it";
  bev::chargeRead(end, 1000, true);
  EXPECT_EQ(bufferevent_get_read_limit(end), EV_SSIZE_MAX) << "nothing charged without a limit";

  const timeval tick{10, 0};
  ev_token_bucket_cfg* cfg = ev_token_bucket_cfg_new(3000, 3000, 5000, 5000, &tick);
  ASSERT_NE(cfg, nullptr);
  ASSERT_EQ(bufferevent_set_rate_limit(end, cfg), 0);
  EXPECT_EQ(bev::readAllowance(end, true), 3000);
  EXPECT_EQ(bev::writeAllowance(end, true), 5000);
  EXPECT_TRUE(bev::limitBinds(bev::readAllowance(end, true)));
  bev::chargeRead(end, 1000, true);
  bev::chargeWrite(end, 2000, true);
  EXPECT_EQ(bufferevent_get_read_limit(end), 2000);
  EXPECT_EQ(bufferevent_get_write_limit(end), 3000);
  EXPECT_EQ(bev::readAllowance(end, true), bufferevent_get_max_to_read(end));

  bufferevent_set_rate_limit(end, nullptr);
  bufferevent_rate_limit_group* group = bufferevent_rate_limit_group_new(base, cfg);
  ASSERT_NE(group, nullptr);
  ASSERT_EQ(bufferevent_add_to_rate_limit_group(end, group), 0);
  EXPECT_EQ(bev::readAllowance(end, true), bufferevent_get_max_to_read(end));
  bev::chargeRead(end, 500, true);
  EXPECT_EQ(bufferevent_rate_limit_group_get_read_limit(group), 2500);
  bufferevent_remove_from_rate_limit_group(end);
  bufferevent_free(pair[0]);
  bufferevent_free(pair[1]);
  bufferevent_rate_limit_group_free(group);
  ev_token_bucket_cfg_free(cfg);
  event_base_free(base);
}

// A pair made with deferred callbacks whose ends' output evbuffers each hold a reference with a
// cleanup (neither end reads: it stays there): the cleanups count the ends libevent really freed.
struct CountedPair {
  bufferevent* end[2] = {nullptr, nullptr};
  int freed = 0;
  static void cleanup(const void*, size_t, void* count) { ++*static_cast<int*>(count); }
  explicit CountedPair(event_base* base) {
    if (bufferevent_pair_new(base, BEV_OPT_DEFER_CALLBACKS, end) != 0) return;
    static const char kByte = 'x';
    for (bufferevent* e : end) evbuffer_add_reference(bufferevent_get_output(e), &kByte, 1, cleanup, &freed);
  }
  // end[0]'s write callback made due, as libevent makes it: a run scheduled, with a reference.
  void makeWriteCallbackDue() {
    bufferevent_setcb(end[0], nullptr, [](bufferevent*, void*) {}, nullptr, nullptr);
    bufferevent_trigger(end[0], EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS);
    bufferevent_setcb(end[0], nullptr, nullptr, nullptr, nullptr);  // as bufferevent_free clears them
  }
};

TEST(BuffereventView, ARunOfClearedCallbacksTakenOffTheBaseLetsEventBaseFreeFreeBothEnds) {
  event_base* base = event_base_new();
  ASSERT_NE(base, nullptr);
  ASSERT_TRUE(bev::fieldsAgree(base));
  CountedPair pair(base);
  ASSERT_NE(pair.end[0], nullptr);
  pair.makeWriteCallbackDue();
  EXPECT_TRUE(bev::dropIdleDeferredRun(pair.end[0], true));
  bufferevent_free(pair.end[0]);
  bufferevent_free(pair.end[1]);
  event_base_free(base);  // with no loop turn: it runs the finalizers, and drops any run unrun
  EXPECT_EQ(pair.freed, 2) << "a run left on the base holds its end (and the pair) for ever";
}

// A pair with deferred callbacks whose first end's write callback counts its runs, one run due.
struct DueWriteCallback {
  event_base* base = event_base_new();
  bufferevent* end[2] = {nullptr, nullptr};
  int writes = 0;
  bool made() {
    if (base == nullptr || !bev::fieldsAgree(base) || bufferevent_pair_new(base, BEV_OPT_DEFER_CALLBACKS, end) != 0)
      return false;
    bufferevent_setcb(end[0], nullptr, [](bufferevent*, void* n) { ++*static_cast<int*>(n); }, nullptr, &writes);
    bufferevent_trigger(end[0], EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS);
    return true;
  }
  void runOnce() { event_base_loop(base, EVLOOP_NONBLOCK); }
  ~DueWriteCallback() {
    for (bufferevent* e : end)
      if (e != nullptr) bufferevent_free(e);
    if (base != nullptr) event_base_free(base);
  }
};

TEST(BuffereventView, ARunOfCallbacksStillSetIsLeftToRun) {
  DueWriteCallback due;
  ASSERT_TRUE(due.made());
  EXPECT_FALSE(bev::dropIdleDeferredRun(due.end[0], true));
  due.runOnce();
  EXPECT_EQ(due.writes, 1);
}

TEST(BuffereventView, ARunUnscheduledWhileTheProgramHoldsItsEndRunsOnceScheduledAgain) {
  DueWriteCallback due;
  ASSERT_TRUE(due.made());
  ASSERT_TRUE(bev::unscheduleRun(due.end[0], true));
  due.runOnce();
  EXPECT_EQ(due.writes, 0) << "unscheduled, it ran";
  bev::rescheduleRun(due.end[0]);
  due.runOnce();
  EXPECT_EQ(due.writes, 1) << "scheduled again, it did not run";
}

}  // namespace
