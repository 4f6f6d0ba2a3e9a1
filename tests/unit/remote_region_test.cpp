// RemoteRegion: the wire value a peer sends, and the bounds check every one-sided access passes.
#include "evrdma/MemoryRegion.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <vector>

namespace {

using evrdma::RemoteRegion;

RemoteRegion region(uint64_t address, uint64_t length, uint32_t access) {
  RemoteRegion r;
  r.address = address;
  r.length = length;
  r.rkey = 0x1234;
  r.access = access;
  return r;
}

TEST(RemoteRegion, RoundTripsThroughItsWireFormat) {
  RemoteRegion sent = region(0x7f0012345000, 1 << 20, evrdma::kRemoteRead | evrdma::kRemoteWrite);
  uint8_t wire[RemoteRegion::kWireSize];
  sent.encode(wire);
  EXPECT_EQ(wire[0], 0x00);  // big-endian address
  EXPECT_EQ(wire[2], 0x7f);
  RemoteRegion got;
  ASSERT_TRUE(RemoteRegion::decode(wire, sizeof wire, got));
  EXPECT_EQ(got.address, sent.address);
  EXPECT_EQ(got.length, sent.length);
  EXPECT_EQ(got.rkey, sent.rkey);
  EXPECT_EQ(got.access, sent.access);
}

TEST(RemoteRegion, MalformedValuesFromAPeerAreRefused) {
  uint8_t wire[RemoteRegion::kWireSize];
  RemoteRegion got;
  region(0x1000, 0, evrdma::kRemoteRead).encode(wire);
  EXPECT_FALSE(RemoteRegion::decode(wire, sizeof wire, got)) << "zero length";
  region(UINT64_MAX - 10, 100, evrdma::kRemoteRead).encode(wire);
  EXPECT_FALSE(RemoteRegion::decode(wire, sizeof wire, got)) << "address + length wraps";
  region(0x1000, 100, 0).encode(wire);
  EXPECT_FALSE(RemoteRegion::decode(wire, sizeof wire, got)) << "no access granted";
  region(0x1000, 100, evrdma::kLocalWrite).encode(wire);
  EXPECT_FALSE(RemoteRegion::decode(wire, sizeof wire, got)) << "a local-only flag";
  region(0x1000, 100, evrdma::kRemoteRead).encode(wire);
  EXPECT_FALSE(RemoteRegion::decode(wire, sizeof wire - 1, got)) << "short";
  EXPECT_FALSE(RemoteRegion::decode(nullptr, 0, got));
}

TEST(RemoteRegion, AccessesInsideTheRegionPass) {
  RemoteRegion r = region(0x1000, 4096, evrdma::kRemoteRead | evrdma::kRemoteWrite);
  EXPECT_EQ(r.check(0, 4096, false), 0);
  EXPECT_EQ(r.check(4095, 1, true), 0);
  EXPECT_EQ(r.check(4096, 0, false), 0);  // an empty access at the very end
}

TEST(RemoteRegion, AccessesOutsideTheRegionAreRefusedIncludingOverflow) {
  RemoteRegion r = region(0x1000, 4096, evrdma::kRemoteRead | evrdma::kRemoteWrite);
  EXPECT_EQ(r.check(0, 4097, false), -ERANGE);
  EXPECT_EQ(r.check(4096, 1, true), -ERANGE);
  EXPECT_EQ(r.check(4097, 0, false), -ERANGE);
  EXPECT_EQ(r.check(1, UINT64_MAX, false), -ERANGE) << "offset + bytes overflows";
  EXPECT_EQ(r.check(UINT64_MAX, 2, false), -ERANGE);
}

TEST(RemoteRegion, AccessNotGrantedIsRefused) {
  RemoteRegion readOnly = region(0x1000, 4096, evrdma::kRemoteRead);
  EXPECT_EQ(readOnly.check(0, 8, false), 0);
  EXPECT_EQ(readOnly.check(0, 8, true), -EACCES);
  RemoteRegion writeOnly = region(0x1000, 4096, evrdma::kRemoteWrite);
  EXPECT_EQ(writeOnly.check(0, 8, false), -EACCES);
}

}  // namespace
