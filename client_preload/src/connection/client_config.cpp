#include "connection/client_config.h"

#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace tally::client {

std::string default_socket_path() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && xdg[0] != '\0') return std::string(xdg) + "/tally/server.sock";
  return "/tmp/tally-" + std::to_string(getuid()) + "/server.sock";
}

bool parse_priority(const char* text, protocol::Priority* out, std::string* error) {
  if (text == nullptr || text[0] == '\0' || std::strcmp(text, "best-effort") == 0) {
    *out = protocol::Priority::BEST_EFFORT;
    return true;
  }
  if (std::strcmp(text, "high") == 0) {
    *out = protocol::Priority::HIGH;
    return true;
  }
  *error = std::string("TALLY_PRIORITY='") + text + "' is not a priority; set it to high or best-effort "
           "(tally-run --priority does)";
  return false;
}

bool parse_memory_quota(const char* text, ClientConfig* out, std::string* error) {
  out->memory_quota_bytes = 0;
  out->memory_quota_percent = 0.0;
  if (text == nullptr || text[0] == '\0') return true;
  const std::string bad = std::string("TALLY_MEMORY_QUOTA='") + text +
                          "' is not a quota; set it to a number of bytes (1073741824) or a percentage "
                          "of device memory in (0, 100] (50%), or use tally-run --memory-quota";
  errno = 0;
  char* end = nullptr;
  size_t len = std::strlen(text);
  if (text[len - 1] == '%') {
    double percent = std::strtod(text, &end);
    if (end != text + len - 1 || errno != 0 || !std::isfinite(percent) || !(percent > 0.0) || percent > 100.0) {
      *error = bad;
      return false;
    }
    out->memory_quota_percent = percent;
    return true;
  }
  if (text[0] < '0' || text[0] > '9') {  // strtoull would accept "-1" and " 5"
    *error = bad;
    return false;
  }
  unsigned long long bytes = std::strtoull(text, &end, 10);
  if (*end != '\0' || errno != 0 || bytes == 0) {
    *error = bad;
    return false;
  }
  out->memory_quota_bytes = bytes;
  return true;
}

bool parse_sm_percent(const char* text, const char* variable, double* out, std::string* error) {
  *out = 0.0;
  if (text == nullptr || text[0] == '\0') return true;
  errno = 0;
  char* end = nullptr;
  double percent = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !std::isfinite(percent) || !(percent > 0.0) || percent > 100.0) {
    *error = std::string(variable) + "='" + text +
             "' is not an SM share; set it to a percentage of the device's SMs in (0, 100] (25), "
             "or use tally-run --sm-percent";
    return false;
  }
  *out = percent;
  return true;
}

bool read_client_config(ClientConfig* out, std::string* error) {
  const char* server = std::getenv("TALLY_SERVER");
  out->socket_path = server != nullptr && server[0] != '\0' ? server : default_socket_path();
  if (out->socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    *error = "the server socket path " + out->socket_path + " is longer than a unix socket allows (" +
             std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes); start tally-server with a shorter --socket";
    return false;
  }
  if (!parse_priority(std::getenv("TALLY_PRIORITY"), &out->priority, error) ||
      !parse_memory_quota(std::getenv("TALLY_MEMORY_QUOTA"), out, error)) {
    return false;
  }
  const char* notice = std::getenv("TALLY_EVICTION_NOTICE");
  out->eviction_notice = notice != nullptr ? notice : "";
  // tally-run's --sm-percent wins; a job set up for MPS keeps the share it gave MPS.
  const char* share = std::getenv("TALLY_SM_PERCENT");
  if (share != nullptr && share[0] != '\0') return parse_sm_percent(share, "TALLY_SM_PERCENT", &out->sm_percent, error);
  return parse_sm_percent(std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                          &out->sm_percent, error);
}

}  // namespace tally::client
