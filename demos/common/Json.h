// `text` as a JSON string (quoted; backslash and double quote escaped, control characters left
// out): what embedded-server's /agents and echo-client's summary line print.
#pragma once

#include <string>

namespace echo {

inline std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

}  // namespace echo
