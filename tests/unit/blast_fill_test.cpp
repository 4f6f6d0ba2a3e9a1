// blast's data pattern: a region filled a piece per loop turn (read mode) must hold exactly what
// one fill() writes, whatever the pieces, so the client's check passes.
#include "Blast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace {

TEST(BlastFill, FillingAMessagePieceByPieceWritesWhatOneFillWrites) {
  for (size_t size : {1u, 5u, 8u, 9u, 300u, 4096u})
    for (size_t piece : {1u, 3u, 7u, 8u, 1000u})
      for (bool patterned : {false, true}) {
        const uint64_t seq = 0x0102030405060708ull + size;
        std::vector<uint8_t> whole(size, 0xEE), pieces(size, 0xEE);
        blast::fill(whole.data(), size, seq, patterned);
        for (size_t from = 0; from < size; from += piece)
          blast::fillRange(pieces.data(), size, seq, patterned, from, std::min(size, from + piece));
        EXPECT_EQ(whole, pieces) << "size " << size << ", pieces of " << piece << ", patterned " << patterned;
        EXPECT_EQ(blast::check(pieces.data(), size, seq, patterned), "") << "size " << size;
      }
}

TEST(BlastFill, ACheckNamesTheWrongByteOfAPatternedMessage) {
  std::vector<uint8_t> data(64);
  blast::fill(data.data(), data.size(), 7, true);
  data[40] ^= 1;
  EXPECT_EQ(blast::check(data.data(), data.size(), 7, true), "operation 7: byte 40 wrong");
  EXPECT_EQ(blast::check(data.data(), data.size(), 7, false), "");
}

}  // namespace
