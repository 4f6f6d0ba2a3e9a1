// Reading a port's hardware counters from sysfs (DeviceCounters.h): all of them, or the RNR ones.
#include "evrdma/DeviceCounters.h"

#include <dirent.h>
#include <infiniband/verbs.h>

#include <cstdio>
#include <memory>

namespace evrdma {

std::map<std::string, uint64_t> readPortCounters(const ibv_context* device, uint8_t port) {
  if (device == nullptr || device->device == nullptr) return {};
  return readPortCounters(std::string(device->device->name), port);
}

RnrCounters readRnrCounters(const ibv_context* device, uint8_t port) {
  if (device == nullptr || device->device == nullptr) return {};
  return readRnrCounters(std::string(device->device->name), port);
}

std::map<std::string, uint64_t> readPortCounters(const std::string& deviceName, uint8_t port) {
  std::map<std::string, uint64_t> counters;
  if (deviceName.empty() || deviceName.find('/') != std::string::npos) return counters;
  std::string dir = "/sys/class/infiniband/" + deviceName + "/ports/" + std::to_string(port) + "/hw_counters";
  std::unique_ptr<DIR, int (*)(DIR*)> entries(opendir(dir.c_str()), closedir);
  if (!entries) return counters;
  while (dirent* entry = readdir(entries.get())) {
    if (entry->d_name[0] == '.') continue;
    std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen((dir + "/" + entry->d_name).c_str(), "r"), std::fclose);
    unsigned long long value = 0;
    if (file && std::fscanf(file.get(), "%llu", &value) == 1) counters[entry->d_name] = value;
  }
  return counters;
}

RnrCounters readRnrCounters(const std::string& deviceName, uint8_t port) {
  RnrCounters rnr;
  auto counters = readPortCounters(deviceName, port);
  auto received = counters.find("rcvd_rnr_err");
  if (received == counters.end()) return rnr;
  rnr.available = true;
  rnr.naksReceived = received->second;
  rnr.naksSent = counters.count("send_rnr_err") ? counters["send_rnr_err"] : 0;
  rnr.retriesExceeded = counters.count("retry_rnr_exceeded_err") ? counters["retry_rnr_exceeded_err"] : 0;
  return rnr;
}

}  // namespace evrdma
