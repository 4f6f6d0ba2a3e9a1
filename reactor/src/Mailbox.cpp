// Mailbox: the locked list of closures from other threads, and the eventfd that wakes the loop for
// the first one.
#include "Mailbox.h"

#include <event2/event.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace evrdma::detail {

Mailbox::~Mailbox() {
  if (event_ != nullptr) event_free(event_);
  if (fd_ >= 0) close(fd_);
}

int Mailbox::init(event_base* base) noexcept {
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd_ < 0) return -errno;
  event_ = event_new(base, fd_, EV_READ | EV_PERSIST, &Mailbox::onReadable, this);
  if (event_ == nullptr || event_add(event_, nullptr) != 0) return -ENOMEM;
  return 0;
}

void Mailbox::post(std::function<void()> fn) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wake = posted_.empty();
    posted_.push_back(std::move(fn));
  }
  if (wake) {
    const uint64_t one = 1;
    ssize_t written = write(fd_, &one, sizeof one);  // EAGAIN: the counter is full, a wake-up is due anyway
    (void)written;
  }
}

void Mailbox::discard() noexcept {
  std::vector<std::function<void()>> dropped;
  std::lock_guard<std::mutex> lock(mutex_);
  dropped.swap(posted_);
}

void Mailbox::onReadable(int fd, short, void* self) noexcept {
  uint64_t count = 0;
  ssize_t got = read(fd, &count, sizeof count);
  (void)got;
  static_cast<Mailbox*>(self)->runPosted();
}

void Mailbox::runPosted() noexcept {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batch.swap(posted_);
  }
  // Posted from now on wake the loop again: they run on its next turn, not in this pass.
  for (auto& fn : batch) fn();
}

}  // namespace evrdma::detail
