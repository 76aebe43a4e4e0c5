#include "connection/handshake.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstring>

namespace tally::client {
namespace {

using protocol::RecordHeader;

std::string how_to_start(const std::string& path) {
  return "start one with `tally-server --socket " + path + "`, or run this job with `tally-run --server PATH -- ...` "
         "(which sets TALLY_SERVER) to use a server listening elsewhere";
}

bool send_all(int fd, const void* data, size_t n, std::string* error) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // MSG_NOSIGNAL: a server that went away must be an error here, not a SIGPIPE
    // that kills the job.
    ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      *error = std::string("sending to tally-server failed: ") + std::strerror(errno);
      return false;
    }
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t n, int timeout_ms, std::string* error) {
  char* p = static_cast<char*>(data);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pfd{fd, POLLIN, 0};
    int ready = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      *error = "tally-server accepted the connection but did not answer within " + std::to_string(timeout_ms) +
               " ms; is it overloaded or stuck? (tally-server status shows its state)";
      return false;
    }
    ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      *error = got == 0 ? "tally-server closed the connection during the handshake (see its log for why)"
                        : std::string("reading from tally-server failed: ") + std::strerror(errno);
      return false;
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// Reads one record whose payload must be exactly sizeof(Msg) bytes of kind Msg::kKind.
template <typename Msg>
bool recv_message(int fd, Msg* out, int timeout_ms, std::string* error) {
  RecordHeader header{};
  if (!recv_all(fd, &header, sizeof header, timeout_ms, error)) return false;
  if (header.kind != static_cast<uint32_t>(Msg::kKind) || header.size != sizeof(Msg)) {
    *error = "tally-server answered with record kind " + std::to_string(header.kind) + " of " +
             std::to_string(header.size) + " bytes where kind " + std::to_string(static_cast<uint32_t>(Msg::kKind)) +
             " of " + std::to_string(sizeof(Msg)) + " bytes was expected; the server and this client library "
             "come from different tally versions";
    return false;
  }
  return recv_all(fd, out, sizeof(Msg), timeout_ms, error);
}

std::string fixed_string(const uint8_t* bytes, size_t n) {
  return std::string(reinterpret_cast<const char*>(bytes), strnlen(reinterpret_cast<const char*>(bytes), n));
}

// A socket connected to the server, or -1 and why not.
int connect_to_server(const ClientConfig& config, std::string* error) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("cannot create a unix socket: ") + std::strerror(errno);
    return -1;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, config.socket_path.c_str(), sizeof(addr.sun_path) - 1);
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    *error = "no tally-server answers at " + config.socket_path + " (" + std::strerror(errno) + "); " +
             how_to_start(config.socket_path);
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

HandshakeResult handshake(const ClientConfig& config, int timeout_ms) {
  HandshakeResult result;
  int fd = connect_to_server(config, &result.error);
  if (fd < 0) return result;
  protocol::HelloMsg hello{};
  hello.protocol_version = protocol::kProtocolVersion;
  hello.pid = static_cast<uint32_t>(getpid());
  hello.priority = static_cast<uint32_t>(config.priority);
  hello.memory_quota = config.memory_quota_bytes;
  hello.memory_quota_percent = config.memory_quota_percent;
  hello.sm_percent = config.sm_percent;
  std::strncpy(reinterpret_cast<char*>(hello.program), program_invocation_short_name, sizeof(hello.program) - 1);
  RecordHeader header{static_cast<uint32_t>(protocol::MessageKind::Hello), sizeof hello, 0};
  char wire[sizeof header + sizeof hello];
  std::memcpy(wire, &header, sizeof header);
  std::memcpy(wire + sizeof header, &hello, sizeof hello);
  if (!send_all(fd, wire, sizeof wire, &result.error) ||
      !recv_message(fd, &result.reply, timeout_ms, &result.error)) {
    ::close(fd);
    return result;
  }
  if (result.reply.status != static_cast<uint32_t>(protocol::HandshakeStatus::OK)) {
    std::string why = fixed_string(result.reply.message, sizeof result.reply.message);
    result.error = "tally-server at " + config.socket_path + " refused this job (status " +
                   std::to_string(result.reply.status) + "): " + (why.empty() ? "no reason given" : why);
    ::close(fd);
    return result;
  }
  if (!recv_message(fd, &result.device, timeout_ms, &result.error)) {
    ::close(fd);
    return result;
  }
  result.socket_fd = fd;
  return result;
}

bool query_driver_version(const ClientConfig& config, int timeout_ms, int* version, std::string* error) {
  int fd = connect_to_server(config, error);
  if (fd < 0) return false;
  RecordHeader header{static_cast<uint32_t>(protocol::MessageKind::DriverVersionQuery), 0, 0};
  protocol::DriverVersionReplyMsg reply{};
  bool answered = send_all(fd, &header, sizeof header, error) && recv_message(fd, &reply, timeout_ms, error);
  ::close(fd);
  if (!answered) return false;
  if (reply.driver_version <= 0) {
    *error = "tally-server answered driver version " + std::to_string(reply.driver_version);
    return false;
  }
  *version = reply.driver_version;
  return true;
}

}  // namespace tally::client
