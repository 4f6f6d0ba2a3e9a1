/// \file
/// Connect-time private data: how much each transport carries, and evrdma's framing of a reject
/// reason. The bytes of a connect request and of an accept belong to the application; evrdma only
/// checks their length. A transport may pad what it delivers (InfiniBand and RoCE always deliver 56
/// bytes with a connect request), so a receiver must never take the delivered length at its word.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct rdma_cm_id;

namespace evrdma {

enum class PrivateDataUse { Connect, Accept, Reject };

/// The most private data `use` may carry on `transport` (ibv_transport_type of the device):
/// InfiniBand / RoCE: connect 56, accept 196, reject 148 bytes; iWARP: 251 for each (MPA allows
/// 512, but librdmacm's rdma_conn_param::private_data_len is one byte, and MPA version 2 adds its
/// 4-byte IRD/ORD header to what it counts).
size_t maxPrivateData(int transport, PrivateDataUse use) noexcept;
/// The same for the device behind `id` once its address is resolved (before that: the smallest,
/// i.e. the InfiniBand limits).
size_t maxPrivateData(const rdma_cm_id* id, PrivateDataUse use) noexcept;
/// The largest any transport allows: longer private data is refused before anything is sent.
constexpr size_t kMaxPrivateDataAnyTransport = 255;
constexpr size_t kMaxPrivateDataIwarp = 251;

/// A reject reason on the wire: "EVRJ", one length byte, then the reason's text. It fits the
/// smallest reject private data (148 bytes): longer reasons are cut at kMaxRejectReason.
constexpr size_t kMaxRejectReason = 143;
std::vector<uint8_t> encodeRejectReason(const std::string& reason);
/// True if `data` holds an evrdma reject reason (possibly padded); `reason` gets its text.
bool decodeRejectReason(const uint8_t* data, size_t length, std::string& reason);

/// The connect private data of the OFA notes' ping-sr protocol, which evrdma's pingpong-server
/// and the original ping-sr agents speak: {uint64 count, uint64 data_size}, big-endian (16 bytes).
/// The client then sends `count` messages of `dataSize` bytes, and each is echoed back.
std::vector<uint8_t> pingSrConnectData(uint64_t count, uint64_t dataSize);

}  // namespace evrdma
