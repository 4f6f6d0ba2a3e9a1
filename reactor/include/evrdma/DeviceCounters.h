/// \file
/// DeviceCounters: the port's hardware counters as the kernel exposes them
/// (`/sys/class/infiniband/DEVICE/ports/PORT/hw_counters`), above all the RNR NAKs: a sender that
/// outruns its peer's posted receives is told "receiver not ready" and retries. Counters are
/// device-wide (every process and connection on the port), and not every device has them (siw
/// has none: iWARP has no RNR).
#pragma once

#include <cstdint>
#include <map>
#include <string>

struct ibv_context;

namespace evrdma {

struct RnrCounters {
  bool available = false;   ///< the device exposes these counters
  uint64_t naksReceived = 0;  ///< rcvd_rnr_err: our sends the peer could not take yet (we retried)
  uint64_t naksSent = 0;      ///< send_rnr_err: sends we could not take yet (the peer retried)
  uint64_t retriesExceeded = 0;  ///< retry_rnr_exceeded_err: gave up (the connection failed)
};

/// Every counter of `port` by name; empty when the device has none.
std::map<std::string, uint64_t> readPortCounters(const ibv_context* device, uint8_t port = 1);
RnrCounters readRnrCounters(const ibv_context* device, uint8_t port = 1);
/// The same by the device's name (ibv_get_device_name): what to keep when the device may go away
/// (a removed device's context is closed, and a pointer to it dangles); empty / unavailable when
/// no device has that name any more.
std::map<std::string, uint64_t> readPortCounters(const std::string& deviceName, uint8_t port = 1);
RnrCounters readRnrCounters(const std::string& deviceName, uint8_t port = 1);

}  // namespace evrdma
