// checkOptions: which ConnectionOptions can be used together, and the name of the one at fault when
// not.
#include "evrdma/ConnectionOptions.h"

#include <cerrno>

namespace evrdma {

int checkOptions(const ConnectionOptions& options, const char*& problem) noexcept {
  if (options.maxMessageSize == 0 || options.maxMessageSize > ConnectionOptions::kMaxMessageSize) {
    problem = "maxMessageSize must be 1 B .. 1 GiB";
    return -EINVAL;
  }
  if (options.recvDepth == 0 || options.sendDepth == 0 || options.recvDepth > 4096 || options.sendDepth > 4096) {
    problem = "recvDepth and sendDepth must be 1 .. 4096";
    return -EINVAL;
  }
  if (options.spareRecvBuffers > 4096) {
    problem = "spareRecvBuffers must be 0 .. 4096";
    return -EINVAL;
  }
  if (options.retryCount > 7 || options.rnrRetryCount > 7) {
    problem = "retryCount and rnrRetryCount must be 0 .. 7";
    return -EINVAL;
  }
  if (options.framed && options.recvDepth < ConnectionOptions::kMinFramedRecvDepth) {
    problem = "framed connections need recvDepth >= 5";
    return -EINVAL;
  }
  if (options.lendingPoolBytes > 0 && !options.framed) {
    problem = "lendingPoolBytes needs a framed connection (regions are lent through its frames)";
    return -EINVAL;
  }
  if (options.keepaliveInterval.count() < 0 || options.keepaliveTimeout.count() < 0 || options.idleTimeout.count() < 0) {
    problem = "keepaliveInterval, keepaliveTimeout and idleTimeout cannot be negative";
    return -EINVAL;
  }
  if (options.keepaliveInterval.count() > 0 && !options.framed) {
    problem = "keepaliveInterval needs a framed connection (probes are frames)";
    return -EINVAL;
  }
  if (options.creditTimeout.count() < 0 || (options.creditTimeout.count() > 0 && !options.framed)) {
    problem = "creditTimeout needs a framed connection (credits are frames), and cannot be negative";
    return -EINVAL;
  }
  if (options.keepaliveTimeout.count() > 0 &&
      (options.keepaliveInterval.count() == 0 || options.keepaliveTimeout < options.keepaliveInterval)) {
    problem = "keepaliveTimeout needs keepaliveInterval, and cannot be shorter than it";
    return -EINVAL;
  }
  if (options.lendingPoolBytes > 0 && options.maxLentBytes == 0) {
    problem = "lendingPoolBytes lends nothing while maxLentBytes is 0 (lending off)";
    return -EINVAL;
  }
  if (options.sharedReceiveQueue && usesOwnProtectionDomain(options)) {
    problem = "a connection that lends memory (maxLentBytes) or has ownProtectionDomain cannot use a "
              "sharedReceiveQueue: that queue's buffers are on the device's protection domain";
    return -EINVAL;
  }
  if (options.sharedReceiveQueue && !options.autoPostRecv) {
    problem = "sharedReceiveQueue needs autoPostRecv: its buffers are shared by every connection";
    return -EINVAL;
  }
  return 0;
}

}  // namespace evrdma
