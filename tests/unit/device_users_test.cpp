// DeviceUsers: librdmacm is let go of a removed device (the devices are listed) only once no
// Reactor holds CQs, a channel or a PD on any removed device, whichever thread lets go last and
// whether the CM id or the CQs go first. Pure logic: the listing itself finds no device here.
#include "DeviceUsers.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace {

using evrdma::detail::DeviceUsers;

ibv_context* context(uintptr_t n) { return reinterpret_cast<ibv_context*>(n); }

TEST(DeviceUsers, ARemovedDeviceIsListedOnlyWhenItsLastHolderLetsGo) {
  DeviceUsers& users = DeviceUsers::instance();
  const int before = users.listings();
  users.hold(context(0x100));  // a worker's CQs
  users.hold(context(0x100));  // another worker's
  users.markRemoved(context(0x100));
  users.forgetRemovedIfUnheld();  // the listener's id went first: it must not list them yet
  users.release(context(0x100));
  EXPECT_EQ(users.listings(), before);
  users.release(context(0x100));
  EXPECT_EQ(users.listings(), before + 1);
  users.forgetRemovedIfUnheld();  // a listener on a device nobody held lists them itself
  EXPECT_EQ(users.listings(), before + 2);
}

TEST(DeviceUsers, ADeviceNotRemovedIsNeverListedWhenLetGo) {
  DeviceUsers& users = DeviceUsers::instance();
  const int before = users.listings();
  users.hold(context(0x200));
  users.release(context(0x200));
  EXPECT_EQ(users.listings(), before);
}

TEST(DeviceUsers, AnotherRemovedDeviceStillHeldHoldsTheListingBack) {
  // A listing closes every removed device that no id uses: one that is still held would be
  // closed under its holder's CQs.
  DeviceUsers& users = DeviceUsers::instance();
  const int before = users.listings();
  users.hold(context(0x300));
  users.hold(context(0x400));
  users.markRemoved(context(0x300));
  users.markRemoved(context(0x400));
  users.release(context(0x300));
  EXPECT_EQ(users.listings(), before);
  users.release(context(0x400));
  EXPECT_EQ(users.listings(), before + 1);
}

TEST(DeviceUsers, HoldersOnManyThreadsListOnceTheLastHasLetGo) {
  DeviceUsers& users = DeviceUsers::instance();
  const int before = users.listings();
  constexpr int kThreads = 8;
  for (int i = 0; i < kThreads; ++i) users.hold(context(0x500));
  users.markRemoved(context(0x500));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back([&users] { users.release(context(0x500)); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(users.listings(), before + 1);
}

}  // namespace
