// ByteStream: one RDMA byte stream behind the bufferevent a program holds. The program's end is a
// filter bufferevent over one end of a bufferevent pair (its free_context tells us when the
// program frees it); the pair's other end is ours: what the program writes is cut into messages and
// sent on a framed connection, taken straight from the program's output while nothing waits before
// it, else from our end's input, where the pair brings it; what the peer sends goes straight into the
// program's input while it reads and nothing waits before it, else into our end's output, and the
// pair carries it to the program. Message zero bytes long: the peer shut its side down.
#pragma once

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "ReactorMember.h"
#include "evrdma/Callbacks.h"
#include "evrdma/Client.h"
#include "evrdma/Stream.h"

struct evbuffer;
struct evbuffer_cb_info;
struct evdns_getaddrinfo_request;

namespace evrdma::detail {

class ReceiveLoan;
class StreamPort;

class ByteStream final : public ReactorMember {
 public:
  // Makes the pair and the program's end; null with `error` set when libevent cannot.
  static ByteStream* create(Reactor& reactor, const StreamOptions& options, int& error) noexcept;
  // The connection a stream with `options` runs on: framed, with the receive buffers it lends.
  static ClientOptions connectionOptions(const StreamOptions& options) noexcept;
  // The stream of a program's end, or null if `bev` is not one.
  static ByteStream* of(bufferevent* bev) noexcept;

  bufferevent* userEnd() const noexcept { return user_; }
  // The handler of the connection that carries the stream (the connection owns it).
  std::unique_ptr<ConnectionHandler> makeHandler();
  // A handler whose stream is made by `make` once its connection is up, on that connection's
  // Reactor and thread (a Listener's worker: the stream's bufferevents live on that loop). A
  // null result closes the connection.
  static std::unique_ptr<ConnectionHandler> handlerMakingStream(std::function<ByteStream*(Connection&)> make);
  // A client stream keeps its Client until it ends.
  void holdClient(Client::Ptr client) noexcept { client_ = std::move(client); }
  int shutdownWrite() noexcept;
  StreamStats stats() const noexcept;
  // An accepted stream: `established` is told once it is up (the listener hands the program its
  // end then); until then the stream is the listener's, and it ends by itself if the connection
  // does.
  void onceEstablished(std::function<void(ByteStream&, Connection&)> established) {
    established_ = std::move(established);
    handedOut_ = false;
  }
  // The listener handed the program its end.
  void handOut() noexcept { handedOut_ = true; }
  // Connecting by host name (StreamHostname.cpp): the name's lookup is pending; it is cancelled
  // if the program frees its end or the Reactor goes first (its callback then hears
  // EVUTIL_EAI_CANCEL and leaves the stream alone).
  void startResolving(evdns_getaddrinfo_request* request) noexcept { resolving_ = request; }
  void resolved() noexcept { resolving_ = nullptr; }
  // The lookup, or the connect after it, failed: no connection comes, and the program hears
  // BEV_EVENT_ERROR with `err` (0 for a lookup) and `dnsError` for bufferevent_socket_get_dns_error.
  void failBeforeConnecting(int err, int dnsError) noexcept;

 private:
  class Handler;
  friend class Handler;

  ByteStream(Reactor& reactor, const StreamOptions& options);
  ~ByteStream();

  // The connection's news (through Handler).
  void onEstablished(Connection& c) noexcept;
  // A message from the peer (0 bytes: its FIN), with the loan of its receive buffer or null
  // (StreamReceiver); false: the window is full, the connection pauses receiving.
  bool onStreamBytes(Connection& c, const uint8_t* data, size_t length, ReceiveLoan* loan) noexcept;
  void onWritable(Connection& c) noexcept;
  void onSendDone(Connection& c, uint64_t tag) noexcept;
  void onDisconnected(Connection& c) noexcept;
  void onRejected(Connection& c, const RejectInfo& info) noexcept;
  void onError(Connection& c, int err, const char* op) noexcept;
  void onClosed(Connection& c) noexcept;
  void onReactorGone() noexcept override;
  // The Reactor lingers: what the program wrote goes out, then the FIN and the disconnect, also
  // when it freed its end since the loop last ran, or still holds it (Reactor::setLinger).
  void beforeLinger() noexcept override;
  bool lingering() const noexcept override;

  // libevent's news.
  static void onProgramWrote(bufferevent* ours, void* self);  // our end's read callback
  static void onDeliveredChanged(evbuffer* buffer, const evbuffer_cb_info* info, void* self);
  static void onProgramFreed(void* self);  // the filter's free_context
  // How much of the program's output `from` the filter moves down to `to` (the pair's end under
  // it) in a pass, in BEV_NORMAL: 0 to wait (the pump flushes again as it sends).
  size_t downTheLongWay(evbuffer* from, evbuffer* to, bool& whole) const noexcept;
  static bufferevent_filter_result passOnceConnected(evbuffer* from, evbuffer* to, ev_ssize_t limit,
                                                     bufferevent_flush_mode mode, void* self);  // its output filter
  static bufferevent_filter_result passWithinReadLimit(evbuffer* from, evbuffer* to, ev_ssize_t limit,
                                                       bufferevent_flush_mode mode, void* self);  // its input filter

  // What the program wrote goes out as messages, as long as send buffers last; then the FIN if
  // one was asked for.
  void pump() noexcept;
  // Whether the pump may take what the program wrote straight from its output evbuffer, past the
  // filter and the pair (each an evbuffer move with its callbacks, and the pair's deferred read
  // callback): the connection is up, the program's end is enabled for writing with no write
  // timeout (the filter restarts it as bytes pass), nothing it wrote before waits on the long way
  // (the pair's end under it, our end's input), and its output holds no more than
  // kStraightOutMost (bulk goes down the pair: see ByteStreamChecks.h) unless it is sent in place.
  bool straightWayOut() const noexcept;
  bool straightWayOut(bool reachable) const noexcept;  // programReachable() asked already
  // Sending in place (ByteStreamInPlace.cpp), where libevent's memory is the RegisteredHeap's: the
  // next message, from the chains taken already, else (with `takeMore`) from the front chain of
  // `input`, taken whole (`taken` bytes), if its memory is the heap's.
  enum class InPlace { Sent, Full, Copy, Failed };
  InPlace sendInPlace(StreamPort& port, evbuffer* input, bool takeMore, size_t& sent, size_t& taken) noexcept;
  // A send in place completed (onOpDone): its bytes' chains may go. False: not one.
  bool onSentInPlace(uint64_t tag) noexcept;
  static void onPumpDue(evutil_socket_t, short, void* self);  // pumpDue_'s callback
  // The program's end's write-timeout event, hooked (BuffereventView.h): writing was enabled
  // again, or the filter passed bytes on; or a write timeout of the program's ran out.
  static void onWriteTimeoutEvent(evutil_socket_t fd, short what, void* self);
  static void onReadTimeoutEvent(evutil_socket_t fd, short what, void* end);
  // A rate limit binds the program's end and it took its share of this loop pass (EV_READ: read;
  // EV_WRITE: written), as a socket reads or writes once per pass: the next waits for the next
  // pass (nextPassDue_). Taken again and again within one pass, a rate-limit group's share (a
  // part of its bucket) let the first member take the whole bucket and the others none.
  void tookShare(short what) noexcept;
  static void onNextPassDue(evutil_socket_t, short, void* self);
  // Adds a received message to `to`: in its receive buffer with `loan` (ReceiveLoan), else copied
  // (and counted). False only if libevent could not add it.
  bool deliverInto(evbuffer* to, const uint8_t* data, size_t length, ReceiveLoan* loan) noexcept;
  // Whether a message `length` bytes long may go straight into the program's input, past the pair
  // and the filter (each hop an evbuffer move, callbacks and a deferred activation): only while
  // the program reads (its end enabled, below its read high watermark with the message, within
  // its read rate limit and its share of this pass), nothing received waits on the long way (the
  // bytes keep their order), and no read timeout is set (the filter restarts it as bytes pass
  // through it; the straight way does not). Notes whether a rate limit binds (readLimited_).
  bool straightWayIn(size_t length) noexcept;
  // Received bytes on their way in to the program, both sides of the pair (while it holds its
  // end): what the receive window bounds.
  size_t heldOnTheWayIn() const noexcept;
  // Nothing received waits in our end's output or in the pair's end under the program.
  bool longWayEmpty() const noexcept;
  // The peer's bytes reached the program (or the window has room again): receiving resumes, and
  // EOF follows the last byte.
  void afterDelivery() noexcept;
  // The program has not freed its end (false from the moment it calls bufferevent_free).
  bool programHoldsItsEnd() const noexcept;
  // It holds its end and may be told (its bytes, events): not while the Reactor lingers.
  bool programReachable() const noexcept;
  // Tells the program `what` (BEV_EVENT_*), with `err` as EVUTIL_SOCKET_ERROR().
  void tellProgram(short what, int err) noexcept;
  // The program is gone: what it wrote before goes out, the FIN, then the connection closes.
  void closeWhenSent() noexcept;
  // The connection closed, or went without a word (it never started): an accepted stream never
  // handed out lets go of its end.
  void connectionEnded() noexcept;
  // The program freed its end: what it wrote that has not reached our end yet is taken over.
  void keepWhatTheProgramWrote() noexcept;
  // The program let go of its end: what it wrote is ours to send (keepWhatTheProgramWrote).
  void letGo() noexcept;
  // What waits in `under`'s output (the pair's end under the program's) and in `program`'s (its
  // end, if given) goes after what our end's input holds: the pair froze the ends of these buffers
  // that only it adds to or takes from, so they are unfrozen for the move.
  void moveWrittenToOurEnd(bufferevent* under, bufferevent* program) noexcept;
  // Frees the stream once the program's end and the connection are both gone.
  void maybeEnd() noexcept;
  // Frees our end of the pair.
  void freeOurEnd() noexcept;
  // The Reactor goes: a run of the program's end's callbacks still scheduled after it freed it goes.
  void dropProgramEndsIdleRun() noexcept;

  Reactor& reactor_;
  StreamOptions options_;
  bufferevent* user_ = nullptr;     // the program's end (a filter over userPair_): the program frees it
  bufferevent* userPair_ = nullptr;  // the pair's end under it (freed with it)
  bufferevent* ours_ = nullptr;      // the pair's end the stream reads and writes
  bufferevent* heldPair_ = nullptr;  // pair[0], referenced until the program's end is freed
  Connection* connection_ = nullptr;  // while it is open
  Client::Ptr client_;
  // An accepted stream's end that never became the program's, freed (its finalizer follows).
  void freeEndNeverHandedOut() noexcept;
  evdns_getaddrinfo_request* resolving_ = nullptr;  // connecting by name, the lookup pending
  void cancelResolving() noexcept;
  ConnectionStats lastStats_;  // the connection's, kept once it is gone
  Handler* handler_ = nullptr;  // while the connection holds it
  // The evbuffers of the ends, through libevent's getters once, when the ends are made: an end
  // keeps its evbuffers for its whole life, and a getter call per use (several a message) cost a
  // ping-pong's round trip ~100 instructions. Valid while the end they belong to is.
  evbuffer* userIn_ = nullptr;   // user_'s: the program's input and output
  evbuffer* userOut_ = nullptr;
  evbuffer* pairIn_ = nullptr;   // userPair_'s, the pair's end under the program
  evbuffer* pairOut_ = nullptr;
  evbuffer* oursIn_ = nullptr;   // ours_'s
  evbuffer* oursOut_ = nullptr;
  bool oursReading_ = false;  // ours_ reads (EV_READ enabled): only pump changes it
  // Made active when the program writes and the straight way out is open: the pump runs once the
  // program's callback has returned, so a turn's writes leave as one message.
  event* pumpDue_ = nullptr;
  bool pumpIsDue_ = false;  // pumpDue_ is active
  event* nextPassDue_ = nullptr;  // made when a binding rate limit's share is first taken (tookShare)
  bool readShareTaken_ = false;   // this pass's: our end's writing is off until the next (the pair moves nothing up)
  bool writeShareTaken_ = false;  // this pass's: the program's output waits for the next
  bool readLimited_ = false;      // a read rate limit bound the last straightWayIn
  // Sent in place: the chains taken whole from what the program wrote, held until the sends of
  // their bytes completed; the bytes posted and not completed, and those not posted yet (at the
  // back, before anything still in our end's input or the program's output).
  evbuffer* sentInPlace_ = nullptr;
  size_t postedInPlace_ = 0;
  size_t unpostedInPlace_ = 0;
  uint32_t unpostedLkey_ = 0;  // the lkey of the chain they are in (the last taken)
  bool inPlaceFull_ = false;  // a send window of bytes is out in place: onOpDone pumps again
  uint64_t bytesInPlace_ = 0;
  bool enableHooked_ = false;    // the program's end's write-timeout event is ours (BuffereventView.h)
  event_callback_fn ownTimeoutCallback_ = nullptr;  // what it called before: a timeout of the program's
  void* ownTimeoutArg_ = nullptr;
  bool readEnableHooked_ = false;  // ... and its read-timeout event (reading enabled again)
  event_callback_fn ownReadTimeoutCallback_ = nullptr;
  void* ownReadTimeoutArg_ = nullptr;
  std::function<void(ByteStream&, Connection&)> established_;
  bool connected_ = false;       // established, and not closed
  bool handedOut_ = true;        // the program has its end (an accepted stream's only once up)
  bool programGone_ = false;     // the program freed its end (what it wrote is ours to send)
  bool endFinalized_ = false;    // libevent finalized the program's end (onProgramFreed ran)
  bool closeOnceFinDone_ = false;  // the connection closes once the FIN's send completed
  bool connectionGone_ = false;  // onClosed came (or there never was a connection)
  bool blocked_ = false;         // no send buffer free: the pump waits for onWritable
  bool finWanted_ = false;       // shutdownWrite, or the program freed its end
  bool finSent_ = false;
  bool fieldsRead_ = false;      // libevent's fields read in place of their getters (BuffereventView.h)
  size_t messageMost_ = 0;       // the longest message both sides take (once connected)
  uint64_t taken_ = 0;           // bytes taken from the program and sent
  uint64_t finAt_ = 0;           // with finWanted_: the FIN goes once this many are taken
  uint64_t bytesLent_ = 0, bytesCopied_ = 0;  // received
  uint64_t messagesStraightIn_ = 0;            // received, that went straight into the program's input
  uint64_t messagesStraightOut_ = 0;           // sent, taken straight from the program's output
  uint64_t bytesDownWhole_ = 0;                // passed down the filter in whole chains (no copy)
  bool finDone_ = false;         // the FIN's send completed
  bool peerFinished_ = false;    // the peer's FIN arrived
  bool eofTold_ = false;
  bool receivingPaused_ = false;
  bool reactorGone_ = false;
  bool shutdownUntold_ = false;  // gone while the program held its end: ESHUTDOWN on its next pass
  bool runMovedToHook_ = false;  // ... after the run of its callbacks that was scheduled then
  bool pairRunMovedToHook_ = false;  // ... and the pair's end's under it
  bool reactorLingers_ = false;  // ~Reactor lingers (beforeLinger): nothing reaches the program
  bool ending_ = false;          // the delete is scheduled
};

}  // namespace evrdma::detail
