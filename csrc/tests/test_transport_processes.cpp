// The transport between two real processes (fork): long streams with every byte
// checked, bulk bytes through an arena, peer death and closed flags detected in
// bounded time, and blocked waits that do not burn CPU.
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "tally/segment.h"
#include "test_transport_util.h"

using namespace tally::transport;

namespace {

SegmentSizes sizes(uint64_t ring_bytes, uint64_t arena_bytes) {
  SegmentSizes s;
  s.request_bytes = ring_bytes;
  s.completion_bytes = ring_bytes;
  s.upload_bytes = arena_bytes;
  s.download_bytes = arena_bytes;
  return s;
}

uint64_t record_size(uint64_t i) { return (i * 2654435761u) % 121; }  // 0..120 bytes
uint8_t record_byte(uint64_t i, uint64_t j) { return static_cast<uint8_t>(i * 31 + j * 7 + 1); }
uint8_t chunk_byte(uint64_t k, uint64_t j) { return static_cast<uint8_t>(k * 13 + j); }
uint64_t chunk_size(uint64_t k) { return 1 + (k * 2654435761u) % (300 * 1024); }

// Runs `body` in a child process that exits 0 on success, 3 on a transport error.
pid_t spawn(const std::function<void()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", getpid(), e.what());
      _exit(3);
    }
    _exit(0);
  }
  return pid;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// 2 million records of 0..120 bytes through a 64 KiB ring (thousands of wraps),
// producer in the child, every byte checked in the parent.
void two_process_record_stream() {
  const std::string name = tally_test::unique_segment_name("stream");
  auto server = Segment::create(name, sizes(1 << 16, 4096));
  const uint64_t total = 2'000'000;
  const pid_t child = spawn([&] {
    auto client = Segment::open(name);
    RecordRing& tx = client->request_ring();
    std::vector<uint8_t> buf(128);
    for (uint64_t i = 0; i < total; ++i) {
      const uint64_t n = record_size(i);
      for (uint64_t j = 0; j < n; ++j) buf[j] = record_byte(i, j);
      if (tx.push(static_cast<uint32_t>(100 + i % 5), i, buf.data(), n, Deadline::never()) != WaitStatus::kReady)
        throw TransportError("push failed");
    }
  });
  RecordRing& rx = server->request_ring();
  RecordView v;
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < total; ++i) {
    if (rx.peek(&v, Deadline::after_seconds(20)) != WaitStatus::kReady) tally_test::fail(__FILE__, __LINE__, "peek");
    if (v.tag != i || v.kind != 100 + i % 5 || v.size != record_size(i))
      tally_test::fail(__FILE__, __LINE__, "record " + std::to_string(i) + " out of order or resized");
    for (uint64_t j = 0; j < v.size; ++j)
      if (v.payload[j] != record_byte(i, j)) tally_test::fail(__FILE__, __LINE__, "record " + std::to_string(i) + " damaged");
    bytes += v.size;
    rx.consume(v);
  }
  CHECK_EQ(wait_exit_code(child), 0);
  CHECK(bytes > total * 50);
  CHECK_EQ(rx.used(), uint64_t{0});
  server->unlink();
}

// 192 MiB in chunks of 1 B..300 KiB through a 1 MiB upload arena, named by
// records on the request ring; the parent checks every byte and releases in order.
void two_process_arena_stream() {
  const std::string name = tally_test::unique_segment_name("arena");
  auto server = Segment::create(name, sizes(1 << 12, 1 << 20));
  const uint64_t total_bytes = 192ull << 20;
  struct Ref {
    uint64_t offset, length;
  };
  const pid_t child = spawn([&] {
    auto client = Segment::open(name);
    ByteArena& arena = client->upload();
    RecordRing& tx = client->request_ring();
    uint64_t sent = 0;
    for (uint64_t k = 0; sent < total_bytes; ++k) {
      const uint64_t n = std::min(chunk_size(k), total_bytes - sent);
      uint64_t offset;
      if (arena.reserve(n, Deadline::never(), &offset) != WaitStatus::kReady) throw TransportError("reserve failed");
      uint8_t* p = arena.data() + offset;
      for (uint64_t j = 0; j < n; ++j) p[j] = chunk_byte(k, j);
      const Ref ref{offset, n};
      if (tx.push(1, k, &ref, sizeof ref, Deadline::never()) != WaitStatus::kReady) throw TransportError("push failed");
      sent += n;
    }
  });
  RecordRing& rx = server->request_ring();
  ByteArena& arena = server->upload();
  RecordView v;
  uint64_t received = 0, chunks = 0;
  for (uint64_t k = 0; received < total_bytes; ++k, ++chunks) {
    if (rx.peek(&v, Deadline::after_seconds(20)) != WaitStatus::kReady) tally_test::fail(__FILE__, __LINE__, "peek");
    Ref ref;
    std::memcpy(&ref, v.payload, sizeof ref);
    if (v.tag != k || !arena.contains(ref.offset, ref.length)) tally_test::fail(__FILE__, __LINE__, "bad chunk record");
    const uint8_t* p = arena.data() + ref.offset;
    for (uint64_t j = 0; j < ref.length; ++j)
      if (p[j] != chunk_byte(k, j)) tally_test::fail(__FILE__, __LINE__, "chunk " + std::to_string(k) + " damaged");
    arena.release(ref.offset, ref.length);
    rx.consume(v);
    received += ref.length;
  }
  CHECK_EQ(wait_exit_code(child), 0);
  CHECK_EQ(received, total_bytes);
  CHECK(chunks > 1000);
  CHECK_EQ(arena.used(), uint64_t{0});
  server->unlink();
}

// The client pushes a few records and is SIGKILLed; the server drains them, then
// its blocked pop fails with kPeerGone within the peer-check interval, although the
// child is still an unreaped zombie.
void server_detects_killed_client() {
  const std::string name = tally_test::unique_segment_name("kill");
  auto server = Segment::create(name, sizes(4096, 4096));
  const pid_t child = spawn([&] {
    auto client = Segment::open(name);
    for (uint64_t i = 0; i < 10; ++i) client->request_ring().push(7, i, &i, 8, Deadline::never());
    raise(SIGKILL);
  });
  RecordRing& rx = server->request_ring();
  RecordView v;
  for (uint64_t i = 0; i < 10; ++i) {
    CHECK(rx.peek(&v, Deadline::after_seconds(10)) == WaitStatus::kReady);
    CHECK_EQ(v.tag, i);
    rx.consume(v);
  }
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(rx.peek(&v, Deadline::never()) == WaitStatus::kPeerGone);
  CHECK(tally_test::seconds_since(t0) < 1.0);
  CHECK_EQ(wait_exit_code(child), 128 + SIGKILL);
  server->unlink();
}

// The server dies while the client is blocked on an empty completion ring and
// while it is blocked pushing into a full request ring.
void client_detects_killed_server() {
  const std::string name = tally_test::unique_segment_name("srvkill");
  int ready[2];
  CHECK_EQ(pipe(ready), 0);
  const pid_t child = spawn([&] {
    auto server = Segment::create(name, sizes(256, 4096));
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(2);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    raise(SIGKILL);
  });
  char c;
  CHECK_EQ(read(ready[0], &c, 1), ssize_t{1});
  auto client = Segment::open(name);
  client->unlink();
  RecordRing& tx = client->request_ring();
  while (tx.try_push(1, 1, nullptr, 0)) {
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::thread blocked_pusher([&] { CHECK(tx.push(1, 1, nullptr, 0, Deadline::never()) == WaitStatus::kPeerGone); });
  RecordView v;
  CHECK(client->completion_ring().peek(&v, Deadline::never()) == WaitStatus::kPeerGone);
  blocked_pusher.join();
  const double waited = tally_test::seconds_since(t0);
  CHECK(waited > 0.1 && waited < 1.5);
  CHECK_EQ(wait_exit_code(child), 128 + SIGKILL);
  close(ready[0]);
  close(ready[1]);
}

// A live client that marks its side closed wakes the server at once.
void closed_flag_wakes_peer() {
  const std::string name = tally_test::unique_segment_name("closed");
  WaitPolicy slow_checks;
  slow_checks.peer_check_ns = 10'000'000'000;  // only the flag and its wake-up can end the wait
  auto server = Segment::create(name, sizes(4096, 4096), slow_checks);
  const pid_t child = spawn([&] {
    auto client = Segment::open(name);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    client->mark_closed();
    pause();
  });
  RecordView v;
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the child attach (client pid set)
  CHECK(server->request_ring().peek(&v, Deadline::after_seconds(5)) == WaitStatus::kPeerGone);
  CHECK(tally_test::seconds_since(t0) < 1.0);
  kill(child, SIGKILL);
  wait_exit_code(child);
  server->unlink();
}

// Blocked waits sleep: CPU time of the waiting thread is a small fraction of the wait.
void idle_waits_use_no_cpu() {
  const std::string name = tally_test::unique_segment_name("idle");
  auto server = Segment::create(name, sizes(256, 4096));
  auto client = Segment::open(name);
  server->unlink();
  RecordView v;
  double cpu0 = tally_test::thread_cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  CHECK(server->request_ring().peek(&v, Deadline::after_seconds(0.5)) == WaitStatus::kTimedOut);
  double wall = tally_test::seconds_since(t0), cpu = tally_test::thread_cpu_seconds() - cpu0;
  std::printf("    empty-ring wait: %.3f s wall, %.4f s cpu\n", wall, cpu);
  CHECK(wall >= 0.5);
  CHECK(cpu < 0.05);

  while (client->request_ring().try_push(1, 1, nullptr, 0)) {
  }
  cpu0 = tally_test::thread_cpu_seconds();
  t0 = std::chrono::steady_clock::now();
  CHECK(client->request_ring().push(1, 1, nullptr, 0, Deadline::after_seconds(0.5)) == WaitStatus::kTimedOut);
  wall = tally_test::seconds_since(t0);
  cpu = tally_test::thread_cpu_seconds() - cpu0;
  std::printf("    full-ring wait:  %.3f s wall, %.4f s cpu\n", wall, cpu);
  CHECK(cpu < 0.05);
}

}  // namespace

int main() {
  tally_test::run_case("two_process_record_stream", two_process_record_stream);
  tally_test::run_case("two_process_arena_stream", two_process_arena_stream);
  tally_test::run_case("server_detects_killed_client", server_detects_killed_client);
  tally_test::run_case("client_detects_killed_server", client_detects_killed_server);
  tally_test::run_case("closed_flag_wakes_peer", closed_flag_wakes_peer);
  tally_test::run_case("idle_waits_use_no_cpu", idle_waits_use_no_cpu);
  return tally_test::finish("test_transport_processes");
}
