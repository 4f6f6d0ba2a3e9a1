// TurnQueue: queuing closures, and running at most perTurn of them on each turn of the loop.
#include "TurnQueue.h"

namespace evrdma::detail {

void TurnQueue::push(std::function<void()> fn) {
  queued_.push_back(std::move(fn));
  turn_.schedule();
}

void TurnQueue::discard() noexcept {
  turn_.cancel();
  queued_.clear();
}

void TurnQueue::onTurn(int, short, void* self) noexcept { static_cast<TurnQueue*>(self)->runTurn(); }

void TurnQueue::runTurn() noexcept {
  // What a closure queues joins the line behind the others: at most perTurn_ run now.
  const std::shared_ptr<bool> alive = alive_;
  for (size_t ran = 0; ran < perTurn_ && !queued_.empty(); ++ran) {
    std::function<void()> fn = std::move(queued_.front());
    queued_.pop_front();
    fn();
    if (!*alive) return;
  }
  if (!queued_.empty()) turn_.schedule();
}

}  // namespace evrdma::detail
