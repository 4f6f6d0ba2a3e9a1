/// \file
/// UniqueHandle: sole ownership of a C handle (a verbs or CM object), released by a deleter.
/// Move-only, like std::unique_ptr, but the deleter is a stateless type so the handle stays one
/// pointer wide, and the deleter's result (verbs destroy calls can fail) is reported, not dropped.
#pragma once

#include <utility>

namespace evrdma {

template <typename T, typename Deleter>
class UniqueHandle {
 public:
  UniqueHandle() noexcept = default;
  explicit UniqueHandle(T* handle) noexcept : handle_(handle) {}
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  UniqueHandle(UniqueHandle&& other) noexcept : handle_(other.release()) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ~UniqueHandle() { reset(); }

  T* get() const noexcept { return handle_; }
  T* operator->() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /// Gives up ownership without destroying.
  T* release() noexcept { return std::exchange(handle_, nullptr); }

  /// Destroys the held handle (if any) and takes `handle`. Returns the deleter's result:
  /// 0, or -errno when the object could not be destroyed (e.g. a CQ still has a QP on it).
  int reset(T* handle = nullptr) noexcept {
    T* old = std::exchange(handle_, handle);
    return old ? Deleter{}(old) : 0;
  }

 private:
  T* handle_ = nullptr;
};

}  // namespace evrdma
