// One POSIX shared-memory segment per client, holding everything the client and
// the server exchange:
//
//   [header page: SegmentHeader]
//   [request ring    control | data]   client -> server records
//   [completion ring control | data]   server -> client records
//   [upload arena    control | data]   client -> server bulk bytes (memcpy HtoD)
//   [download arena  control | data]   server -> client bulk bytes (memcpy DtoH)
//
// Every part starts on a page. The server creates the segment (mode 0600) and is
// the "server" side; the client attaches by name with open() and is the "client"
// side. A side only produces into the parts it owns (see the table in parts()).
// open() validates everything before trusting it: magic, protocol version, sizes
// and offsets against the file size, and the ring indices.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "tally/byte_arena.h"
#include "tally/futex_wait.h"
#include "tally/protocol_generated.h"
#include "tally/spsc_ring.h"
#include "tally/transport_errors.h"

namespace tally::transport {

enum class Side { kServer, kClient };

inline const char* side_name(Side side) { return side == Side::kServer ? "server" : "client"; }

struct RegionLayout {
  uint64_t control_offset;  // SpscControl
  uint64_t data_offset;
  uint64_t capacity;        // bytes, power of two
};

// Immutable after create(): copied and validated once by open(), then only the
// local copy is used, so later scribbles cannot move the parts around.
struct SegmentLayout {
  uint32_t magic;
  uint32_t protocol_version;
  uint32_t header_bytes;  // sizeof(SegmentHeader)
  uint32_t reserved0;
  uint64_t total_bytes;   // file size
  RegionLayout request;
  RegionLayout completion;
  RegionLayout upload;
  RegionLayout download;
  int32_t creator_pid;    // the server
  uint32_t reserved1;
};
static_assert(std::is_trivially_copyable_v<SegmentLayout>);
static_assert(sizeof(SegmentLayout) == 128);
static_assert(offsetof(SegmentLayout, total_bytes) == 16 && offsetof(SegmentLayout, request) == 24 &&
              offsetof(SegmentLayout, creator_pid) == 120);

// Changes while connected.
struct alignas(64) SegmentState {
  std::atomic<int32_t> client_pid;       // 0 until a client attaches
  std::atomic<uint32_t> server_closed;   // 1: the server will not touch the segment again
  std::atomic<uint32_t> client_closed;   // 1: the client will not touch the segment again
  // 1: the server evicted the client; an Evicted record on the completion ring says why.
  // Set after that record is pushed, so a client that sees the flag finds the record.
  std::atomic<uint32_t> evicted;
  // Which server serves the segment, changed only by compare-and-swap (owner_exchange):
  // when a job migrates, its source and target settle on exactly one of them here,
  // even when the message saying who won is lost. tally/server/handover.py encodes
  // it; 0 until a first migration means the creator serves.
  std::atomic<uint64_t> owner;
  uint8_t reserved[40];
};
static_assert(sizeof(SegmentState) == 64 && offsetof(SegmentState, owner) == 16);
static_assert(std::atomic<int32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);

struct SegmentHeader {
  SegmentLayout layout;
  SegmentState state;
};
static_assert(sizeof(SegmentHeader) == 192 && offsetof(SegmentHeader, state) == 128);
static_assert(std::is_standard_layout_v<SegmentHeader>);

struct SegmentSizes {
  uint64_t request_bytes = 1u << 20;
  uint64_t completion_bytes = 1u << 18;
  uint64_t upload_bytes = 64u << 20;
  uint64_t download_bytes = 64u << 20;
};

// The protocol's HelloReply carries the name in 64 NUL-padded bytes.
constexpr size_t kMaxSegmentName = 63;
constexpr uint64_t kPageBytes = 4096;

namespace detail {

inline bool pid_alive_without_pidfd(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A killed but unreaped process still answers kill(); its state says zombie.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return errno != ENOENT;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // comm may contain spaces and ')'
  return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

// True unless `pid` has exited (zombies count as exited).
inline bool process_alive(pid_t pid) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return errno == ESRCH ? false : pid_alive_without_pidfd(pid);
  pollfd p{pidfd, POLLIN, 0};
  const bool alive = poll(&p, 1, 0) == 0;
  ::close(pidfd);
  return alive;
}

// Answers "is the other side still there?" from the header: its closed flag, then
// the connection both sides hold when one was named (watch_socket): the kernel
// hangs it up when the peer process ends, however it ends, and that works across
// pid namespaces (a job in a container cannot see the server's pid, nor the
// server the job's). Without a socket, its process: a pidfd is immune to pid
// reuse and turns readable at exit, even while the process is an unreaped zombie;
// without pidfd support, kill(pid, 0) plus the /proc state.
class PeerWatch : public PeerProbe {
 public:
  PeerWatch(SegmentHeader* header, Side self) : header_(header), self_(self) {}
  ~PeerWatch() override {
    if (pidfd_ >= 0) ::close(pidfd_);
  }
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  bool peer_closed() const {
    const auto& flag = self_ == Side::kServer ? header_->state.client_closed : header_->state.server_closed;
    return flag.load(std::memory_order_acquire) != 0;
  }

  pid_t peer_pid() const {
    return self_ == Side::kServer ? header_->state.client_pid.load(std::memory_order_acquire) : creator_pid_;
  }

  void set_creator_pid(pid_t pid) { creator_pid_ = pid; }

  // Watch this connected socket (not owned) instead of the peer's pid.
  void watch_socket(int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    socket_fd_ = fd;
    watched_alive_ = true;
    probed_at_ns_ = INT64_MIN / 2;
  }

  bool alive() override {
    if (peer_closed()) return false;
    if (socket_fd_ >= 0) return socket_alive();
    const pid_t pid = peer_pid();
    if (pid <= 0 || pid == getpid()) return true;  // not attached yet, or ourselves
    std::lock_guard<std::mutex> lock(mutex_);     // several threads may wait on one segment
    if (pid != watched_pid_) {
      if (pidfd_ >= 0) ::close(pidfd_);
      watched_pid_ = pid;
      pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
      watched_alive_ = !(pidfd_ < 0 && errno == ESRCH);
      probed_at_ns_ = INT64_MIN / 2;  // probe below, right away
    }
    // Waits call this each time they go to sleep; asking the kernel at most once
    // per kMinProbeInterval keeps that cheap without delaying detection much.
    const int64_t now = monotonic_ns();
    if (!watched_alive_ || now - probed_at_ns_ < kMinProbeIntervalNs) return watched_alive_;
    probed_at_ns_ = now;
    if (pidfd_ < 0) {
      watched_alive_ = pid_alive_without_pidfd(pid);
    } else {
      pollfd p{pidfd_, POLLIN, 0};
      watched_alive_ = poll(&p, 1, 0) == 0;
    }
    return watched_alive_;
  }

 private:
  bool socket_alive() {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t now = monotonic_ns();
    if (!watched_alive_ || now - probed_at_ns_ < kMinProbeIntervalNs) return watched_alive_;
    probed_at_ns_ = now;
    pollfd p{socket_fd_, POLLRDHUP, 0};   // data waiting (POLLIN) says nothing either way
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) watched_alive_ = false;
    return watched_alive_;
  }

  SegmentHeader* header_;
  Side self_;
  pid_t creator_pid_ = 0;
  int socket_fd_ = -1;
  static constexpr int64_t kMinProbeIntervalNs = 1'000'000;
  std::mutex mutex_;
  pid_t watched_pid_ = 0;
  int pidfd_ = -1;
  bool watched_alive_ = true;
  int64_t probed_at_ns_ = 0;
};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

inline void check_name(const std::string& name) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos || name.size() > kMaxSegmentName)
    throw TransportError("invalid segment name '" + name + "': expected '/' followed by 1.." +
                         std::to_string(kMaxSegmentName - 1) + " characters without '/', e.g. /tally-1234-1");
}

}  // namespace detail

class Segment {
 public:
  // Server side: creates the segment with mode 0600 (fails if the name exists).
  static std::unique_ptr<Segment> create(const std::string& name, const SegmentSizes& sizes = {},
                                         const WaitPolicy& policy = {}) {
    detail::check_name(name);
    SegmentLayout layout = plan_layout(sizes);
    detail::Fd fd(shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600));
    if (fd.get() < 0) {
      const int err = errno;
      if (err == EEXIST)
        throw TransportError("shared-memory segment " + name + " already exists; pick another name or remove a stale one (" +
                             "/dev/shm" + name + ") left by a crashed server");
      throw TransportError(system_error_text("shm_open(" + name + ", O_CREAT|O_EXCL)", err));
    }
    try {
      // shm_open's mode is filtered by the umask; make it exactly 0600.
      if (fchmod(fd.get(), 0600) != 0) throw TransportError(system_error_text("fchmod(" + name + ", 0600)"));
      if (ftruncate(fd.get(), static_cast<off_t>(layout.total_bytes)) != 0)
        throw TransportError(system_error_text("ftruncate(" + name + ", " + std::to_string(layout.total_bytes) + ")"));
      // Commit the pages now: a full /dev/shm must fail here with a message, not
      // later with SIGBUS on first touch.
      const int err = posix_fallocate(fd.get(), 0, static_cast<off_t>(layout.total_bytes));
      if (err != 0 && err != EOPNOTSUPP && err != EINVAL)
        throw TransportError(system_error_text("cannot reserve " + std::to_string(layout.total_bytes) +
                                                   " bytes for segment " + name + " (is /dev/shm full? use smaller rings/arenas)",
                                               err));
      auto* base = map(fd.get(), layout.total_bytes, name);
      layout.creator_pid = getpid();
      auto* header = reinterpret_cast<SegmentHeader*>(base);
      std::memcpy(&header->layout, &layout, sizeof layout);
      // Publish the magic last, so a concurrent open() never trusts a half-written header.
      reinterpret_cast<std::atomic<uint32_t>*>(&header->layout.magic)->store(protocol::kSegmentMagic, std::memory_order_release);
      layout.magic = protocol::kSegmentMagic;
      auto segment = std::unique_ptr<Segment>(new Segment(name, base, layout, Side::kServer, policy));
      segment->shm_fd_ = ::dup(fd.get());
      return segment;
    } catch (...) {
      shm_unlink(name.c_str());
      throw;
    }
  }

  // Client side (and tests): attaches to an existing segment, validates it and
  // records this process as the attached client.
  static std::unique_ptr<Segment> open(const std::string& name, const WaitPolicy& policy = {}) {
    detail::check_name(name);
    detail::Fd fd(shm_open(name.c_str(), O_RDWR, 0));
    if (fd.get() < 0) {
      const int err = errno;
      if (err == ENOENT)
        throw TransportError("no shared-memory segment named " + name + "; the server creates it at handshake, is it running?");
      throw TransportError(system_error_text("shm_open(" + name + ")", err));
    }
    struct stat st;
    if (fstat(fd.get(), &st) != 0) throw TransportError(system_error_text("fstat(" + name + ")"));
    const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
    if (file_bytes < sizeof(SegmentHeader))
      throw CorruptSegment("segment " + name + " is " + std::to_string(file_bytes) + " bytes, too small for a tally header");
    auto* base = map(fd.get(), file_bytes, name);
    try {
      SegmentLayout layout;
      std::memcpy(&layout, base, sizeof layout);
      validate_layout(layout, file_bytes, name);
      auto segment = std::unique_ptr<Segment>(new Segment(name, base, layout, Side::kClient, policy));
      segment->validate_indices();
      segment->attach_client();
      return segment;
    } catch (...) {
      munmap(base, file_bytes);
      throw;
    }
  }

  // Server side, for a job migrating here from another server on this node: attaches
  // to the segment that server created (its shared-memory object `fd`, passed over a
  // unix socket: the name is unlinked once the client attached), validated as open()
  // does, as its server end; the attached client stays as it is.
  static std::unique_ptr<Segment> adopt(int fd, const std::string& name, const WaitPolicy& policy = {}) {
    detail::check_name(name);
    struct stat st;
    if (fstat(fd, &st) != 0) throw TransportError(system_error_text("fstat(segment " + name + ")"));
    const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
    if (file_bytes < sizeof(SegmentHeader))
      throw CorruptSegment("segment " + name + " is " + std::to_string(file_bytes) + " bytes, too small for a tally header");
    auto* base = map(fd, file_bytes, name);
    try {
      SegmentLayout layout;
      std::memcpy(&layout, base, sizeof layout);
      validate_layout(layout, file_bytes, name);
      auto segment = std::unique_ptr<Segment>(new Segment(name, base, layout, Side::kServer, policy));
      segment->validate_indices();
      segment->shm_fd_ = ::dup(fd);
      return segment;
    } catch (...) {
      munmap(base, file_bytes);
      throw;
    }
  }

  // The shared-memory object of a server-side segment (-1 on the client side): what a
  // migration hands to the next server.
  int shm_fd() const { return shm_fd_; }

  ~Segment() {
    munmap(base_, layout_.total_bytes);
    if (shm_fd_ >= 0) ::close(shm_fd_);
  }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const std::string& name() const { return name_; }
  uint64_t size() const { return layout_.total_bytes; }
  Side side() const { return side_; }
  const SegmentLayout& layout() const { return layout_; }
  pid_t creator_pid() const { return layout_.creator_pid; }
  pid_t client_pid() const { return header()->state.client_pid.load(std::memory_order_acquire); }
  WaitPolicy& policy() { return policy_; }

  RecordRing& request_ring() { return request_; }        // client produces, server consumes
  RecordRing& completion_ring() { return completion_; }  // server produces, client consumes
  ByteArena& upload() { return upload_; }                // client produces, server consumes
  ByteArena& download() { return download_; }            // server produces, client consumes

  bool peer_alive() { return peer_.alive(); }
  // The peer is this socket's other end: its hang-up means the peer is gone (see PeerWatch).
  void watch_peer_socket(int fd) { peer_.watch_socket(fd); }

  // This side will not touch the segment again: a peer blocked on it wakes and
  // fails with PeerDead once it has drained what is there.
  void mark_closed() {
    auto& flag = side_ == Side::kServer ? header()->state.server_closed : header()->state.client_closed;
    flag.store(1, std::memory_order_release);
    for (SpscControl* c : controls()) {
      EventCount(&c->data_ready).wake_now();
      EventCount(&c->space_ready).wake_now();
    }
  }

  // The server evicted the client (push the Evicted record first): the client's next
  // request fails at once, before it reaches the ring.
  void mark_evicted() { header()->state.evicted.store(1, std::memory_order_release); }
  bool evicted() const { return header()->state.evicted.load(std::memory_order_acquire) != 0; }

  uint64_t owner() const { return header()->state.owner.load(std::memory_order_acquire); }
  // Sets the owner word to `desired` if it holds `expected`; returns the value it held
  // (== expected: this call changed it).
  uint64_t owner_exchange(uint64_t expected, uint64_t desired) {
    header()->state.owner.compare_exchange_strong(expected, desired, std::memory_order_acq_rel);
    return expected;
  }

  // Removes the name (mappings stay valid). Returns false when it was already gone.
  bool unlink() {
    if (shm_unlink(name_.c_str()) == 0) return true;
    if (errno == ENOENT) return false;
    throw TransportError(system_error_text("shm_unlink(" + name_ + ")"));
  }

  uint8_t* base() const { return base_; }

 private:
  Segment(std::string name, uint8_t* base, const SegmentLayout& layout, Side side, const WaitPolicy& policy)
      : name_(std::move(name)), base_(base), layout_(layout), side_(side), policy_(policy), peer_(header(), side) {
    peer_.set_creator_pid(layout_.creator_pid);
    const RingRole client_end = side == Side::kClient ? RingRole::kProducer : RingRole::kConsumer;
    const RingRole server_end = side == Side::kServer ? RingRole::kProducer : RingRole::kConsumer;
    // Each side's presence slot is on the wait line of the ring it consumes (cpu_presence.h).
    std::atomic<uint32_t>* server_slot = &control(layout_.request)->data_ready.present_cpu;
    std::atomic<uint32_t>* client_slot = &control(layout_.completion)->data_ready.present_cpu;
    const Presence presence = side == Side::kServer ? Presence{server_slot, client_slot} : Presence{client_slot, server_slot};
    request_ = RecordRing(control(layout_.request), data(layout_.request), layout_.request.capacity, client_end,
                          "request ring", &policy_, &peer_, presence);
    completion_ = RecordRing(control(layout_.completion), data(layout_.completion), layout_.completion.capacity,
                             server_end, "completion ring", &policy_, &peer_, presence);
    upload_ = ByteArena(control(layout_.upload), data(layout_.upload), layout_.upload.capacity, client_end,
                        "upload arena", &policy_, &peer_, presence);
    download_ = ByteArena(control(layout_.download), data(layout_.download), layout_.download.capacity, server_end,
                          "download arena", &policy_, &peer_, presence);
  }

  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base_); }
  SpscControl* control(const RegionLayout& r) const { return reinterpret_cast<SpscControl*>(base_ + r.control_offset); }
  uint8_t* data(const RegionLayout& r) const { return base_ + r.data_offset; }
  std::array<SpscControl*, 4> controls() const {
    return {control(layout_.request), control(layout_.completion), control(layout_.upload), control(layout_.download)};
  }

  static uint8_t* map(int fd, uint64_t bytes, const std::string& name) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw TransportError(system_error_text("mmap(" + name + ", " + std::to_string(bytes) + " bytes)"));
    return static_cast<uint8_t*>(p);
  }

  static SegmentLayout plan_layout(const SegmentSizes& sizes) {
    SegmentLayout layout{};
    layout.protocol_version = protocol::kProtocolVersion;
    layout.header_bytes = sizeof(SegmentHeader);
    uint64_t cursor = kPageBytes;  // the header page
    auto place = [&](RegionLayout& r, uint64_t capacity, uint64_t min_capacity, const char* what) {
      if (!is_power_of_two(capacity) || capacity < min_capacity || capacity > (uint64_t{1} << 40))
        throw TransportError(std::string(what) + " of " + std::to_string(capacity) + " bytes: must be a power of two between " +
                             std::to_string(min_capacity) + " and 2^40");
      r.control_offset = cursor;
      r.data_offset = cursor + kPageBytes;
      r.capacity = capacity;
      cursor = r.data_offset + round_up(capacity, kPageBytes);
    };
    place(layout.request, sizes.request_bytes, RecordRing::kMinCapacity, "request_bytes");
    place(layout.completion, sizes.completion_bytes, RecordRing::kMinCapacity, "completion_bytes");
    place(layout.upload, sizes.upload_bytes, ByteArena::kMinCapacity, "upload_bytes");
    place(layout.download, sizes.download_bytes, ByteArena::kMinCapacity, "download_bytes");
    layout.total_bytes = cursor;
    return layout;
  }

  static void validate_layout(const SegmentLayout& l, uint64_t file_bytes, const std::string& name) {
    auto bad = [&](const std::string& what) { throw CorruptSegment("segment " + name + " has a corrupt header: " + what); };
    if (l.magic != protocol::kSegmentMagic) {
      char hex[64];
      std::snprintf(hex, sizeof hex, "magic 0x%08x, expected 0x%08x", l.magic, protocol::kSegmentMagic);
      throw CorruptSegment("segment " + name + " is not a tally segment (" + hex + ")");
    }
    if (l.protocol_version != protocol::kProtocolVersion)
      throw ProtocolVersionMismatch("protocol version mismatch: segment v" + std::to_string(l.protocol_version) +
                                    ", this build v" + std::to_string(protocol::kProtocolVersion) +
                                    "; run client and server from the same tally installation");
    if (l.header_bytes != sizeof(SegmentHeader))
      bad("header size " + std::to_string(l.header_bytes) + ", expected " + std::to_string(sizeof(SegmentHeader)));
    if (l.total_bytes != file_bytes)
      bad("total size " + std::to_string(l.total_bytes) + " differs from the file size " + std::to_string(file_bytes));
    if (l.creator_pid <= 0) bad("creator pid " + std::to_string(l.creator_pid));
    struct Span {
      uint64_t begin, end;
      const char* what;
    };
    std::array<Span, 9> spans{};
    size_t n = 0;
    spans[n++] = {0, sizeof(SegmentHeader), "header"};
    auto check_region = [&](const RegionLayout& r, uint64_t min_capacity, const char* what) {
      if (!is_power_of_two(r.capacity) || r.capacity < min_capacity)
        bad(std::string(what) + " capacity " + std::to_string(r.capacity) + " is not a power of two >= " + std::to_string(min_capacity));
      if (r.control_offset % 64 != 0 || r.data_offset % 64 != 0) bad(std::string(what) + " is not 64-byte aligned");
      if (r.control_offset > file_bytes || file_bytes - r.control_offset < sizeof(SpscControl) || r.data_offset > file_bytes ||
          file_bytes - r.data_offset < r.capacity)
        bad(std::string(what) + " lies outside the " + std::to_string(file_bytes) + "-byte segment");
      spans[n++] = {r.control_offset, r.control_offset + sizeof(SpscControl), what};
      spans[n++] = {r.data_offset, r.data_offset + r.capacity, what};
    };
    check_region(l.request, RecordRing::kMinCapacity, "request ring");
    check_region(l.completion, RecordRing::kMinCapacity, "completion ring");
    check_region(l.upload, ByteArena::kMinCapacity, "upload arena");
    check_region(l.download, ByteArena::kMinCapacity, "download arena");
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].begin < spans[i - 1].end) bad(std::string(spans[i].what) + " overlaps " + spans[i - 1].what);
  }

  void validate_indices() const {
    // An arena may hold a skipped tail beside a full arena of chunks (byte_arena.h).
    auto check = [&](const RegionLayout& r, uint64_t align, uint64_t max_in_flight, const char* what) {
      const SpscControl* c = control(r);
      const uint64_t read = c->read.pos.load(std::memory_order_acquire);
      const uint64_t write = c->write.pos.load(std::memory_order_acquire);
      if (write - read > max_in_flight || read % align != 0 || write % align != 0)
        throw CorruptSegment("segment " + name_ + " has a corrupt " + what + ": producer position " + std::to_string(write) +
                             ", consumer position " + std::to_string(read) + ", capacity " + std::to_string(r.capacity));
    };
    check(layout_.request, RecordRing::kAlign, layout_.request.capacity, "request ring");
    check(layout_.completion, RecordRing::kAlign, layout_.completion.capacity, "completion ring");
    check(layout_.upload, ByteArena::kChunkAlign, 2 * layout_.upload.capacity, "upload arena");
    check(layout_.download, ByteArena::kChunkAlign, 2 * layout_.download.capacity, "download arena");
  }

  void attach_client() {
    auto& slot = header()->state.client_pid;
    const pid_t self = getpid();
    pid_t current = slot.load(std::memory_order_acquire);
    for (;;) {
      const bool previous_closed = header()->state.client_closed.load(std::memory_order_acquire) != 0;
      if (current != 0 && current != self && !previous_closed && detail::process_alive(current))
        throw TransportError("segment " + name_ + " is already attached by client pid " + std::to_string(current) +
                             "; each segment serves one client process");
      if (slot.compare_exchange_weak(current, self, std::memory_order_acq_rel)) break;
    }
    header()->state.client_closed.store(0, std::memory_order_release);
  }

  std::string name_;
  int shm_fd_ = -1;  // server side: the shared-memory object, kept for a migration
  uint8_t* base_;
  SegmentLayout layout_;
  Side side_;
  WaitPolicy policy_;
  detail::PeerWatch peer_;
  RecordRing request_;
  RecordRing completion_;
  ByteArena upload_;
  ByteArena download_;
};

}  // namespace tally::transport
