// The transports' private-data limits, and the encoding of a reject reason (PrivateData.h).
#include "evrdma/PrivateData.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cstring>

#include "evrdma/ByteOrder.h"

namespace evrdma {
namespace {
constexpr char kRejectMagic[4] = {'E', 'V', 'R', 'J'};
}

size_t maxPrivateData(int transport, PrivateDataUse use) noexcept {
  // MPA carries 512, but rdma_conn_param::private_data_len is a uint8_t: librdmacm passes 255,
  // and MPA version 2 puts its 4-byte IRD/ORD header in the same length (the peer then receives
  // 4 bytes more than sent): with 252-255 bytes siw's connect failed, a bare ECONNRESET.
  if (transport == IBV_TRANSPORT_IWARP) return kMaxPrivateDataIwarp;
  switch (use) {  // IB CM message sizes less the rdma_cm header (36 bytes on REQ)
    case PrivateDataUse::Connect: return 56;
    case PrivateDataUse::Accept: return 196;
    case PrivateDataUse::Reject: return 148;
  }
  return 56;
}

size_t maxPrivateData(const rdma_cm_id* id, PrivateDataUse use) noexcept {
  int transport = IBV_TRANSPORT_IB;
  if (id != nullptr && id->verbs != nullptr && id->verbs->device != nullptr) transport = id->verbs->device->transport_type;
  return maxPrivateData(transport, use);
}

std::vector<uint8_t> encodeRejectReason(const std::string& reason) {
  size_t length = std::min(reason.size(), kMaxRejectReason);
  std::vector<uint8_t> out(sizeof kRejectMagic + 1 + length);
  std::memcpy(out.data(), kRejectMagic, sizeof kRejectMagic);
  out[sizeof kRejectMagic] = static_cast<uint8_t>(length);
  std::memcpy(out.data() + sizeof kRejectMagic + 1, reason.data(), length);
  return out;
}

bool decodeRejectReason(const uint8_t* data, size_t length, std::string& reason) {
  if (data == nullptr || length < sizeof kRejectMagic + 1) return false;
  if (std::memcmp(data, kRejectMagic, sizeof kRejectMagic) != 0) return false;
  size_t textLength = data[sizeof kRejectMagic];
  if (textLength > kMaxRejectReason || sizeof kRejectMagic + 1 + textLength > length) return false;
  reason.assign(reinterpret_cast<const char*>(data) + sizeof kRejectMagic + 1, textLength);
  return true;
}

std::vector<uint8_t> pingSrConnectData(uint64_t count, uint64_t dataSize) {
  std::vector<uint8_t> out(16);
  putBig64(out.data(), count);
  putBig64(out.data() + 8, dataSize);
  return out;
}

}  // namespace evrdma
