// PreparedMappings: the memory of a connection's large buffers, mapped and populated (its pages
// faulted in) a piece at a time before the connection is set up, so that no loop turn pays for
// all of it. Registering populated pages is cheap (64 MiB: ~1 ms in the test bed); registering
// fresh ones populates them inside ibv_reg_mr (~40 ms, ~190 ms when the guest first touches
// them), and a request for large messages would stall every other peer of the loop that long.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace evrdma::detail {

// Maps whole pages of anonymous, zeroed memory for `length` bytes; their number of bytes in
// `mapped`. Null if it cannot (nothing mapped).
void* mapPages(size_t length, size_t& mapped) noexcept;

class PreparedMappings {
 public:
  PreparedMappings() = default;
  PreparedMappings(const PreparedMappings&) = delete;
  PreparedMappings& operator=(const PreparedMappings&) = delete;
  ~PreparedMappings();

  // Maps one block per length (whole pages), none populated yet. 0 or -ENOMEM.
  int map(const std::vector<size_t>& lengths) noexcept;
  // Populates about `bytes` more (whole pages, at least one); returns what it populated.
  size_t populate(size_t bytes) noexcept;
  bool populated() const noexcept { return populated_ == mapped_; }

  // Gives away a populated block made for `length` bytes (its memory and mapped size, which the
  // caller unmaps), or nullptr if none is left.
  void* take(size_t length, size_t& mapped) noexcept;

 private:
  struct Block {
    void* memory;
    size_t length, mapped, populated;
  };
  std::vector<Block> blocks_;
  uint64_t mapped_ = 0, populated_ = 0;
};

}  // namespace evrdma::detail
