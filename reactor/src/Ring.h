// Ring: a first-in first-out queue that keeps its storage. std::deque frees a block and allocates
// another every few elements as a queue cycles through it (a send backlog that fills and drains
// once per poll, say); a ring allocates only when it grows past its largest size so far, so once
// warm it allocates nothing per element.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace evrdma::detail {

template <typename T>
class Ring {
 public:
  bool empty() const noexcept { return count_ == 0; }
  size_t size() const noexcept { return count_; }
  T& front() noexcept { return slots_[head_]; }
  const T& front() const noexcept { return slots_[head_]; }
  // The i-th element from the front.
  T& operator[](size_t i) noexcept { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  const T& operator[](size_t i) const noexcept { return slots_[(head_ + i) & (slots_.size() - 1)]; }

  void push_back(T value) {
    if (count_ == slots_.size()) grow();
    slots_[(head_ + count_) & (slots_.size() - 1)] = std::move(value);
    ++count_;
  }
  void pop_front() noexcept {
    slots_[head_] = T();  // lets go of what the element held now, not when its slot is reused
    head_ = (head_ + 1) & (slots_.size() - 1);
    --count_;
  }
  void clear() noexcept {
    while (!empty()) pop_front();
    head_ = 0;
  }
  // Takes every element equal to `value` out, the others kept in their order.
  void remove(const T& value) {
    for (size_t k = count_; k > 0; --k) {
      T element = std::move(front());
      pop_front();
      if (!(element == value)) push_back(std::move(element));
    }
  }

 private:
  void grow() {
    std::vector<T> bigger(std::max<size_t>(8, 2 * slots_.size()));  // a power of two: indexes are masked
    for (size_t i = 0; i < count_; ++i) bigger[i] = std::move((*this)[i]);
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0, count_ = 0;
};

}  // namespace evrdma::detail
