// FlaggedList: objects each in a list at most once, whether it is in kept as a flag in the object
// itself, so adding asks no search: the CQ pool's CQs that may have room, the arena's slabs with a
// free block. Taking from the back is O(1); removing one from the middle searches (rare: an
// object that goes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace evrdma::detail {

template <typename T, bool T::*InList>
class FlaggedList {
 public:
  void add(T* item) {
    if (item->*InList) return;
    item->*InList = true;
    items_.push_back(item);
  }
  bool empty() const noexcept { return items_.empty(); }
  T* back() const noexcept { return items_.back(); }
  void popBack() noexcept {
    items_.back()->*InList = false;
    items_.pop_back();
  }
  void remove(T* item) noexcept {
    if (!(item->*InList)) return;
    item->*InList = false;
    items_.erase(std::find(items_.begin(), items_.end(), item));
  }
  void clear() noexcept {
    for (T* item : items_) item->*InList = false;
    items_.clear();
  }

 private:
  std::vector<T*> items_;
};

}  // namespace evrdma::detail
