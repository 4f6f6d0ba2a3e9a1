// RegisteredHeap, as libevent's memory functions, without a device: blocks of 1 KiB and up come
// from its range, in powers of two (whole slabs above 1 MiB), smaller ones and foreign pointers
// stay malloc's; a freed block is the next of its size handed out (what the streams' guard must
// hold back until a send completes); realloc keeps the bytes; threads allocate at once safely.
// Registration (lkeyFor) needs a protection domain: tests/rdma/stream_in_place_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "RegisteredHeap.h"

namespace {

using evrdma::detail::RegisteredHeap;

TEST(RegisteredHeap, BlocksOfAKibibyteAndUpComeFromTheRangeSmallerOnesFromMalloc) {
  RegisteredHeap* heap = RegisteredHeap::instance();
  ASSERT_NE(heap, nullptr);
  void* small = RegisteredHeap::allocate(RegisteredHeap::kSmallest - 1);
  void* chain = RegisteredHeap::allocate(RegisteredHeap::kSmallest);
  void* big = RegisteredHeap::allocate(RegisteredHeap::kSlabBytes * 3 + 1);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(chain, nullptr);
  ASSERT_NE(big, nullptr);
  EXPECT_FALSE(heap->contains(small));
  EXPECT_TRUE(heap->contains(chain));
  EXPECT_TRUE(heap->contains(big));
  std::memset(big, 0x5a, RegisteredHeap::kSlabBytes * 3 + 1);  // all of it is writable
  uint32_t lkey = 0;
  EXPECT_FALSE(heap->lkeyFor(nullptr, chain, 1, lkey)) << "no protection domain";
  RegisteredHeap::release(small);
  RegisteredHeap::release(chain);
  RegisteredHeap::release(big);
  RegisteredHeap::release(nullptr);
}

TEST(RegisteredHeap, AFreedBlockIsTheNextOfItsSizeHandedOut) {
  void* first = RegisteredHeap::allocate(48 << 10);  // a 64 KiB block
  ASSERT_NE(first, nullptr);
  RegisteredHeap::release(first);
  void* again = RegisteredHeap::allocate(60 << 10);
  EXPECT_EQ(again, first) << "the next 64 KiB block is the one just freed";
  void* run = RegisteredHeap::allocate(5 << 20);
  RegisteredHeap::release(run);
  EXPECT_EQ(RegisteredHeap::allocate(5 << 20), run) << "a run of slabs is reused whole";
  RegisteredHeap::release(again);
  RegisteredHeap::release(run);
}

TEST(RegisteredHeap, ReallocKeepsTheBytesAndForeignPointersStayMallocs) {
  auto* block = static_cast<char*>(RegisteredHeap::allocate(2000));
  ASSERT_NE(block, nullptr);
  for (int i = 0; i < 2000; ++i) block[i] = static_cast<char>(i);
  EXPECT_EQ(RegisteredHeap::reallocate(block, 2048), block) << "it fits its 2 KiB block";
  auto* grown = static_cast<char*>(RegisteredHeap::reallocate(block, 100000));
  ASSERT_NE(grown, nullptr);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(grown[i], static_cast<char>(i));
  RegisteredHeap::release(grown);
  // Allocated before the heap was libevent's: malloc's, freed and grown by malloc.
  auto* before = static_cast<char*>(std::malloc(16));
  std::strcpy(before, "malloc's");
  auto* after = static_cast<char*>(RegisteredHeap::reallocate(before, 64 << 10));
  ASSERT_NE(after, nullptr);
  EXPECT_FALSE(RegisteredHeap::instance()->contains(after));
  EXPECT_STREQ(after, "malloc's");
  RegisteredHeap::release(after);
}

TEST(RegisteredHeap, ThreadsAllocatingAtOnceNeverShareABlock) {
  constexpr int kThreads = 4, kBlocks = 2000;
  std::vector<std::vector<void*>> held(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &held] {
      for (int i = 0; i < kBlocks; ++i) {
        void* block = RegisteredHeap::allocate(1024u << (i % 6));
        std::memset(block, t, 1024);
        held[static_cast<size_t>(t)].push_back(block);
        if (i % 3 == 0) {
          RegisteredHeap::release(held[static_cast<size_t>(t)].back());
          held[static_cast<size_t>(t)].pop_back();
        }
      }
    });
  for (auto& thread : threads) thread.join();
  std::vector<void*> all;
  for (int t = 0; t < kThreads; ++t) {
    for (void* block : held[static_cast<size_t>(t)]) {
      EXPECT_EQ(*static_cast<unsigned char*>(block), static_cast<unsigned char>(t)) << "another thread wrote it";
      all.push_back(block);
    }
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a block handed out twice";
  for (void* block : all) RegisteredHeap::release(block);
}

}  // namespace
