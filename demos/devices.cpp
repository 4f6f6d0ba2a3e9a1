// devices: every RDMA device on this machine, its attributes, its ports and their GIDs
// (the "devices" example of the OFA notes). Run it where a device exists: tools/rdma-run -- build/demos/devices
#include <arpa/inet.h>
#include <net/if.h>

#include <cstdio>
#include <cstring>

#include "evrdma/Verbs.h"

namespace {

const char* linkLayerName(uint8_t layer) {
  switch (layer) {
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
    default: return "unspecified";
  }
}

const char* gidTypeName(uint32_t type) {
  switch (type) {
    case IBV_GID_TYPE_IB: return "IB";
    case IBV_GID_TYPE_ROCE_V1: return "RoCEv1";
    case IBV_GID_TYPE_ROCE_V2: return "RoCEv2";
    default: return "?";
  }
}

int mtuBytes(ibv_mtu mtu) { return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0; }

void printPort(ibv_context* context, uint8_t port) {
  ibv_port_attr attr{};
  if (int rc = ibv_query_port(context, port, &attr); rc != 0) {
    std::printf("  port %u: ibv_query_port failed: %s\n", port, std::strerror(rc));
    return;
  }
  std::printf("  port %u: state %s, active MTU %d (max %d), link layer %s, lid %u, gid table %d\n", port,
              ibv_port_state_str(attr.state), mtuBytes(attr.active_mtu), mtuBytes(attr.max_mtu),
              linkLayerName(attr.link_layer), attr.lid, attr.gid_tbl_len);
  for (int index = 0; index < attr.gid_tbl_len; ++index) {
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(context, port, index, &entry, 0) != 0) continue;  // empty slot
    char text[INET6_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET6, entry.gid.raw, text, sizeof text);
    char netdev[IF_NAMESIZE] = "-";
    if (entry.ndev_ifindex != 0) if_indextoname(entry.ndev_ifindex, netdev);
    std::printf("    gid[%d] %-40s %-6s netdev %s\n", index, text, gidTypeName(entry.gid_type), netdev);
  }
}

void printDevice(ibv_device* device) {
  std::printf("%s: %s, node GUID %016llx\n", ibv_get_device_name(device),
              ibv_node_type_str(device->node_type),
              static_cast<unsigned long long>(be64toh(ibv_get_device_guid(device))));
  evrdma::DeviceContext context(ibv_open_device(device));
  if (!context) {
    std::printf("  cannot open: %s\n", std::strerror(errno));
    return;
  }
  ibv_device_attr attr{};
  if (int rc = ibv_query_device(context.get(), &attr); rc != 0) {
    std::printf("  ibv_query_device failed: %s\n", std::strerror(rc));
    return;
  }
  std::printf("  firmware %s, vendor 0x%x part %u, %u port(s)\n", attr.fw_ver[0] ? attr.fw_ver : "-",
              attr.vendor_id, attr.vendor_part_id, attr.phys_port_cnt);
  std::printf("  max: qp %d, qp_wr %d, sge %d, cq %d, cqe %d, mr %d, mr_size %llu, pd %d, srq %d, "
              "qp_rd_atom %d\n",
              attr.max_qp, attr.max_qp_wr, attr.max_sge, attr.max_cq, attr.max_cqe, attr.max_mr,
              static_cast<unsigned long long>(attr.max_mr_size), attr.max_pd, attr.max_srq,
              attr.max_qp_rd_atom);
  for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) printPort(context.get(), port);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    bool help = std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0;
    std::fprintf(help ? stdout : stderr,
                 "usage: %s\n"
                 "Lists every RDMA device: its ibv_query_device attributes, its ports (state, MTU,\n"
                 "link layer) and their GIDs. Without an RDMA NIC: tools/rdma-run -- %s\n",
                 argv[0], argv[0]);
    return help ? 0 : 2;
  }
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  if (devices == nullptr) {
    std::fprintf(stderr, "devices: ibv_get_device_list failed: %s\n", std::strerror(errno));
    return 1;
  }
  if (count == 0) std::printf("no RDMA devices (without an RDMA NIC, run this under tools/rdma-run)\n");
  for (int i = 0; i < count; ++i) printDevice(devices[i]);
  ibv_free_device_list(devices);
  return count > 0 ? 0 : 1;
}
