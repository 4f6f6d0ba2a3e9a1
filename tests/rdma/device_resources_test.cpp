// The verbs objects every connection needs, on the test bed's real device.
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "SmallBufferArena.h"
#include "evrdma/BufferPool.h"
#include "evrdma/MemoryRegion.h"
#include "evrdma/Verbs.h"
#include "rdma/TestBed.h"

namespace {

using evrdma::CompletionChannel;
using evrdma::CompletionQueue;
using evrdma::DeviceContext;
using evrdma::MemoryRegionHandle;
using evrdma::ProtectionDomain;

class DeviceResources : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(evrdma::test::loadTestBed(bed_));
    int error = 0;
    context_ = evrdma::openDevice(bed_.device, error);
    ASSERT_TRUE(context_) << "opening " << bed_.device << ": " << strerror(-error);
  }
  evrdma::test::TestBed bed_;
  DeviceContext context_;
};

TEST_F(DeviceResources, DeviceHasAnActivePort) {
  ibv_device_attr device{};
  ASSERT_EQ(ibv_query_device(context_.get(), &device), 0);
  ASSERT_GE(device.phys_port_cnt, 1);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(context_.get(), 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE) << ibv_port_state_str(port.state);
  RecordProperty("active_mtu", 128 << port.active_mtu);
}

TEST_F(DeviceResources, OpeningAnUnknownDeviceReportsEnodev) {
  int error = 0;
  DeviceContext none = evrdma::openDevice("no-such-device", error);
  EXPECT_FALSE(none);
  EXPECT_EQ(error, -ENODEV);
}

TEST_F(DeviceResources, RegistersFourMebibytesForLocalWriteOnly) {
  ProtectionDomain pd(ibv_alloc_pd(context_.get()));
  ASSERT_TRUE(pd);
  std::vector<char> buffer(4 << 20);
  MemoryRegionHandle mr(ibv_reg_mr(pd.get(), buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE));
  ASSERT_TRUE(mr) << "ibv_reg_mr: " << strerror(errno);
  EXPECT_EQ(mr->addr, buffer.data());
  EXPECT_EQ(mr->length, buffer.size());
  EXPECT_NE(mr->lkey, 0u);
  EXPECT_EQ(mr.reset(), 0);
  EXPECT_EQ(pd.reset(), 0);
}

TEST_F(DeviceResources, DeallocatingAProtectionDomainInUseFailsWithEbusy) {
  ProtectionDomain pd(ibv_alloc_pd(context_.get()));
  ASSERT_TRUE(pd);
  std::vector<char> buffer(4096);
  MemoryRegionHandle mr(ibv_reg_mr(pd.get(), buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE));
  ASSERT_TRUE(mr);
  ibv_pd* raw = pd.release();
  EXPECT_EQ(ProtectionDomain(raw).reset(), -EBUSY);  // the MR still holds it...
  mr.reset();
  EXPECT_EQ(ProtectionDomain(raw).reset(), 0);        // ...and once it is gone, the PD goes
}

TEST_F(DeviceResources, CompletionChannelIsNonBlockingAndArmedCqHasNoEventYet) {
  CompletionChannel channel(ibv_create_comp_channel(context_.get()));
  ASSERT_TRUE(channel);
  ASSERT_EQ(evrdma::setNonBlocking(channel->fd), 0);
  int error = 0;
  CompletionQueue cq = CompletionQueue::create(context_.get(), 64, channel.get(), nullptr, error);
  ASSERT_TRUE(cq) << strerror(-error);
  ASSERT_EQ(ibv_req_notify_cq(cq.get(), 0), 0);

  ibv_cq* eventCq = nullptr;
  void* eventContext = nullptr;
  EXPECT_EQ(ibv_get_cq_event(channel.get(), &eventCq, &eventContext), -1);  // returns at once...
  EXPECT_EQ(errno, EAGAIN);                                                 // ...with nothing to get
  pollfd pfd{channel->fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0);

  ibv_wc wc{};
  EXPECT_EQ(ibv_poll_cq(cq.get(), 1, &wc), 0);
  EXPECT_EQ(cq.unackedEvents(), 0u);
  EXPECT_EQ(cq.reset(), 0);  // the CQ goes before its channel
  EXPECT_EQ(channel.reset(), 0);
}

TEST_F(DeviceResources, MemoryRegionGrantsNoRemoteAccessUnlessAsked) {
  ProtectionDomain pd(ibv_alloc_pd(context_.get()));
  ASSERT_TRUE(pd);
  int error = 0;
  evrdma::MemoryRegion local = evrdma::MemoryRegion::allocate(pd.get(), 1 << 20, evrdma::kLocalWrite, error);
  ASSERT_TRUE(local) << strerror(-error);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(local.data()) % 4096, 0u) << "page-aligned";
  EXPECT_EQ(local.length(), 1u << 20);
  evrdma::RemoteRegion remote;
  EXPECT_EQ(local.remote(remote), -EACCES) << "a local region must not be handed to peers";

  evrdma::MemoryRegion shared = evrdma::MemoryRegion::allocate(pd.get(), 4096, evrdma::kRemoteWrite, error);
  ASSERT_TRUE(shared) << strerror(-error);
  EXPECT_TRUE(shared.access() & evrdma::kLocalWrite) << "remote write needs local write";
  ASSERT_EQ(shared.remote(remote), 0);
  EXPECT_EQ(remote.address, reinterpret_cast<uintptr_t>(shared.data()));
  EXPECT_EQ(remote.length, 4096u);
  EXPECT_EQ(remote.rkey, shared.get()->rkey);
  EXPECT_EQ(remote.access, static_cast<uint32_t>(evrdma::kRemoteWrite));
  EXPECT_EQ(remote.check(0, 4096, true), 0);
  EXPECT_EQ(remote.check(0, 1, false), -EACCES);
  EXPECT_TRUE(shared.contains(4000, 96));
  EXPECT_FALSE(shared.contains(4000, 97));
}

TEST_F(DeviceResources, WrappingCallerMemoryRejectsEmptyOrNullBuffers) {
  ProtectionDomain pd(ibv_alloc_pd(context_.get()));
  ASSERT_TRUE(pd);
  int error = 0;
  std::vector<char> buffer(64);
  EXPECT_FALSE(evrdma::MemoryRegion::wrap(pd.get(), buffer.data(), 0, evrdma::kLocalWrite, error));
  EXPECT_EQ(error, -EINVAL);
  EXPECT_FALSE(evrdma::MemoryRegion::wrap(pd.get(), nullptr, 64, evrdma::kLocalWrite, error));
  EXPECT_EQ(error, -EINVAL);
  evrdma::MemoryRegion wrapped = evrdma::MemoryRegion::wrap(pd.get(), buffer.data(), buffer.size(), 0, error);
  ASSERT_TRUE(wrapped) << strerror(-error);
  EXPECT_EQ(wrapped.data(), reinterpret_cast<uint8_t*>(buffer.data()));
}

}  // namespace

namespace {

TEST_F(DeviceResources, ABufferPoolHandsOutEachRegisteredBufferOnceUntilItComesBack) {
  ProtectionDomain pd(ibv_alloc_pd(context_.get()));
  ASSERT_TRUE(pd);
  int error = 0;
  evrdma::BufferPool pool = evrdma::BufferPool::allocate(pd.get(), 4, 4096, evrdma::kLocalWrite, error);
  ASSERT_TRUE(pool) << strerror(-error);
  EXPECT_EQ(pool.region().length(), 4u * 4096);
  std::vector<int> taken;
  for (int i = 0; i < 4; ++i) taken.push_back(pool.acquire());
  EXPECT_EQ(pool.acquire(), -ENOBUFS);
  std::sort(taken.begin(), taken.end());
  EXPECT_EQ(taken, (std::vector<int>{0, 1, 2, 3}));
  evrdma::Slice slice = pool.slice(2, 100);
  EXPECT_EQ(slice.region, &pool.region());
  EXPECT_EQ(slice.offset, 2u * 4096);
  EXPECT_EQ(slice.length, 100u);
  EXPECT_EQ(pool.slice(3).length, 4096u) << "the whole buffer by default";
  EXPECT_EQ(pool.indexOf(slice), 2);
  EXPECT_EQ(pool.data(2), pool.region().data() + 2 * 4096);
  EXPECT_EQ(pool.release(2), 0);
  EXPECT_EQ(pool.release(2), -EINVAL) << "released twice";
  EXPECT_EQ(pool.release(4), -EINVAL) << "not a buffer of the pool";
  EXPECT_EQ(pool.available(), 1u);
  EXPECT_EQ(pool.acquire(), 2);
  EXPECT_FALSE(evrdma::BufferPool::allocate(pd.get(), 0, 4096, 0, error));
  EXPECT_EQ(error, -EINVAL);
  EXPECT_FALSE(evrdma::BufferPool::allocate(pd.get(), 2, SIZE_MAX / 2 + 1, 0, error));
  EXPECT_EQ(error, -EOVERFLOW);
  pool = evrdma::BufferPool{};  // deregistered: the PD can go
  EXPECT_EQ(pd.reset(), 0);
}

// The small buffers of many connections share slabs: 300 blocks of 128 B take three 16 KiB slabs,
// not 300 registrations of a page each; given back, the slabs are deregistered but one spare.
TEST_F(DeviceResources, SmallBuffersShareRegisteredSlabsAndTheSlabsGoWhenUnused) {
  using evrdma::detail::SmallBufferArena;
  ProtectionDomain pd(ibv_alloc_pd(context_.get()));
  ASSERT_TRUE(pd);
  {
    SmallBufferArena arena(pd.get());
    std::vector<SmallBufferArena::Lease> leases;
    int error = 0;
    for (int i = 0; i < 300; ++i) {
      leases.push_back(arena.take(100, error));  // a 128-byte block
      ASSERT_TRUE(leases.back()) << strerror(-error);
      const uint8_t* data = leases.back().data();
      EXPECT_TRUE(std::all_of(data, data + 128, [](uint8_t b) { return b == 0; })) << "block " << i << " not zeroed";
      std::fill(leases.back().data(), leases.back().data() + 128, static_cast<uint8_t>(i));
      EXPECT_NE(leases.back().lkey(), 0u);
    }
    for (int i = 0; i < 300; ++i) {
      const uint8_t* data = leases[i].data();
      EXPECT_TRUE(std::all_of(data, data + 128, [i](uint8_t b) { return b == static_cast<uint8_t>(i); }))
          << "block " << i << " overlaps another";
    }
    EXPECT_EQ(arena.slabCount(), 3u) << "128 blocks of 128 B per 16 KiB slab";
    EXPECT_EQ(arena.blocksInUse(), 300u);
    EXPECT_FALSE(arena.take(SmallBufferArena::kLargestBlock + 1, error));
    EXPECT_EQ(error, -EINVAL);
    leases.clear();
    EXPECT_EQ(arena.slabCount(), 1u) << "one spare slab stays registered";
    EXPECT_EQ(arena.blocksInUse(), 0u);
  }
  EXPECT_EQ(pd.reset(), 0) << "the arena deregistered everything";
}

// A block given back in a full slab is taken again before a new slab is registered: three full
// slabs of 128-byte blocks, one block back in the first and one in the second, two taken: still
// three slabs (the arena lists the slabs with a free block instead of scanning them all).
TEST_F(DeviceResources, ABlockGivenBackInAFullSlabIsTakenBeforeANewSlabIsMade) {
  using evrdma::detail::SmallBufferArena;
  ProtectionDomain pd(ibv_alloc_pd(context_.get()));
  ASSERT_TRUE(pd);
  {
    SmallBufferArena arena(pd.get());
    constexpr size_t kPerSlab = SmallBufferArena::kSlabBytes / 128;
    std::vector<SmallBufferArena::Lease> leases;
    int error = 0;
    for (size_t i = 0; i < 3 * kPerSlab; ++i) {
      leases.push_back(arena.take(128, error));
      ASSERT_TRUE(leases.back()) << strerror(-error);
    }
    ASSERT_EQ(arena.slabCount(), 3u);
    uint8_t* const first = leases[5].data();
    uint8_t* const second = leases[kPerSlab + 7].data();
    leases[5].reset();
    leases[kPerSlab + 7].reset();
    SmallBufferArena::Lease again = arena.take(128, error), more = arena.take(128, error);
    ASSERT_TRUE(again && more) << strerror(-error);
    EXPECT_EQ(arena.slabCount(), 3u) << "a new slab while two blocks were free";
    EXPECT_TRUE((again.data() == first && more.data() == second) || (again.data() == second && more.data() == first));
    EXPECT_EQ(arena.blocksInUse(), 3 * kPerSlab);
  }
  EXPECT_EQ(pd.reset(), 0) << "the arena deregistered everything";
}

}  // namespace
