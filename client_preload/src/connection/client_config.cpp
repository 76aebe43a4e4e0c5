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

bool read_client_config(ClientConfig* out, std::string* error) {
  const char* server = std::getenv("TALLY_SERVER");
  out->socket_path = server != nullptr && server[0] != '\0' ? server : default_socket_path();
  if (out->socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    *error = "the server socket path " + out->socket_path + " is longer than a unix socket allows (" +
             std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes); start tally-server with a shorter --socket";
    return false;
  }
  return parse_priority(std::getenv("TALLY_PRIORITY"), &out->priority, error) &&
         parse_memory_quota(std::getenv("TALLY_MEMORY_QUOTA"), out, error);
}

}  // namespace tally::client
