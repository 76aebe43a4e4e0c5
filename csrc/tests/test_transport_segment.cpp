// Segment creation, naming, permissions, unlink and the validation open() does
// before it trusts a segment.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "tally/segment.h"
#include "test_transport_util.h"

using namespace tally::transport;

namespace {

SegmentSizes small() {
  SegmentSizes s;
  s.request_bytes = 4096;
  s.completion_bytes = 1024;
  s.upload_bytes = 8192;
  s.download_bytes = 16384;
  return s;
}

bool shm_exists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

// Edits the header of a fresh segment through `edit`, then expects open() to
// throw `Exc` mentioning `needle`.
template <class Exc, class Edit>
void expect_open_rejects(const char* needle, Edit edit) {
  const std::string name = tally_test::unique_segment_name("bad");
  auto server = Segment::create(name, small());
  edit(*reinterpret_cast<SegmentHeader*>(server->base()), *server);
  CHECK_THROWS(Exc, needle, Segment::open(name));
  server->unlink();
}

void create_sets_mode_0600_and_layout() {
  const mode_t old_umask = umask(0);  // shm_open alone would give 0600 & ~umask; prove it is exact
  const std::string name = tally_test::unique_segment_name("mode");
  auto server = Segment::create(name, small());
  umask(old_umask);
  struct stat st;
  CHECK_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
  CHECK_EQ(static_cast<int>(st.st_mode & 0777), 0600);
  CHECK_EQ(static_cast<uint64_t>(st.st_size), server->size());
  const SegmentLayout& l = server->layout();
  CHECK_EQ(l.magic, tally::protocol::kSegmentMagic);
  CHECK_EQ(l.protocol_version, tally::protocol::kProtocolVersion);
  CHECK_EQ(l.creator_pid, getpid());
  CHECK_EQ(l.request.capacity, uint64_t{4096});
  CHECK_EQ(l.download.capacity, uint64_t{16384});
  CHECK_EQ(l.request.data_offset % kPageBytes, uint64_t{0});
  CHECK_EQ(server->client_pid(), 0);
  auto client = Segment::open(name);
  CHECK_EQ(server->client_pid(), getpid());
  CHECK_EQ(client->size(), server->size());
  CHECK(server->unlink());
  CHECK(!shm_exists(name));
  CHECK(!server->unlink());  // already gone: not an error
  CHECK_THROWS(TransportError, "no shared-memory segment named", Segment::open(name));
  // Mappings outlive the name.
  CHECK(client->request_ring().try_push(3, 4, "x", 1));
  RecordView v;
  CHECK(server->request_ring().try_peek(&v));
}

void create_refuses_bad_arguments() {
  const std::string name = tally_test::unique_segment_name("dup");
  auto first = Segment::create(name, small());
  CHECK_THROWS(TransportError, "already exists", Segment::create(name, small()));
  first->unlink();
  CHECK_THROWS(TransportError, "invalid segment name", Segment::create("no-slash", small()));
  CHECK_THROWS(TransportError, "invalid segment name", Segment::create("/a/b", small()));
  CHECK_THROWS(TransportError, "invalid segment name", Segment::create("/" + std::string(70, 'x'), small()));
  SegmentSizes odd = small();
  odd.upload_bytes = 10000;
  CHECK_THROWS(TransportError, "upload_bytes of 10000 bytes: must be a power of two", Segment::create(name, odd));
  SegmentSizes tiny = small();
  tiny.request_bytes = 32;
  CHECK_THROWS(TransportError, "request_bytes", Segment::create(name, tiny));
  CHECK(!shm_exists(name));  // failed creates leave nothing behind
}

void open_validates_header() {
  expect_open_rejects<CorruptSegment>("is not a tally segment (magic 0x12345678",
                                      [](SegmentHeader& h, Segment&) { h.layout.magic = 0x12345678; });
  expect_open_rejects<ProtocolVersionMismatch>("protocol version mismatch: segment v99, this build v",
                                               [](SegmentHeader& h, Segment&) { h.layout.protocol_version = 99; });
  expect_open_rejects<CorruptSegment>("header size", [](SegmentHeader& h, Segment&) { h.layout.header_bytes = 64; });
  expect_open_rejects<CorruptSegment>("differs from the file size",
                                      [](SegmentHeader& h, Segment&) { h.layout.total_bytes += 4096; });
  expect_open_rejects<CorruptSegment>("lies outside", [](SegmentHeader& h, Segment&) {
    h.layout.download.data_offset = h.layout.total_bytes - 4096;  // 16 KiB cannot fit there
  });
  expect_open_rejects<CorruptSegment>("lies outside", [](SegmentHeader& h, Segment&) {
    h.layout.request.control_offset = UINT64_MAX - 63;  // offset arithmetic must not overflow
  });
  expect_open_rejects<CorruptSegment>("not a power of two",
                                      [](SegmentHeader& h, Segment&) { h.layout.completion.capacity = 3000; });
  expect_open_rejects<CorruptSegment>("overlaps", [](SegmentHeader& h, Segment&) {
    h.layout.upload.data_offset = h.layout.request.data_offset;
  });
  expect_open_rejects<CorruptSegment>("not 64-byte aligned",
                                      [](SegmentHeader& h, Segment&) { h.layout.upload.control_offset += 8; });
  expect_open_rejects<CorruptSegment>("creator pid", [](SegmentHeader& h, Segment&) { h.layout.creator_pid = 0; });
}

void open_validates_indices() {
  expect_open_rejects<CorruptSegment>("corrupt request ring", [](SegmentHeader&, Segment& s) {
    auto* c = reinterpret_cast<SpscControl*>(s.base() + s.layout().request.control_offset);
    c->read.pos.store(4096 * 3);  // consumer ahead of producer
  });
  expect_open_rejects<CorruptSegment>("corrupt completion ring", [](SegmentHeader&, Segment& s) {
    auto* c = reinterpret_cast<SpscControl*>(s.base() + s.layout().completion.control_offset);
    c->write.pos.store(1024 + 8);  // more published than the ring holds
  });
  expect_open_rejects<CorruptSegment>("corrupt upload arena", [](SegmentHeader&, Segment& s) {
    auto* c = reinterpret_cast<SpscControl*>(s.base() + s.layout().upload.control_offset);
    c->write.pos.store(100);  // not chunk aligned
  });
}

void open_rejects_short_file() {
  const std::string name = tally_test::unique_segment_name("short");
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  CHECK(fd >= 0);
  CHECK_EQ(ftruncate(fd, 100), 0);
  close(fd);
  CHECK_THROWS(CorruptSegment, "too small for a tally header", Segment::open(name));
  shm_unlink(name.c_str());
}

// A second live client may not attach; once the first is gone (even as an
// unreaped zombie), a new one may.
void one_live_client_at_a_time() {
  const std::string name = tally_test::unique_segment_name("attach");
  auto server = Segment::create(name, small());
  int ready[2];
  CHECK_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    auto client = Segment::open(name);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  char c;
  CHECK_EQ(read(ready[0], &c, 1), ssize_t{1});
  CHECK_EQ(server->client_pid(), child);
  CHECK_THROWS(TransportError, "already attached by client pid " + std::to_string(child), Segment::open(name));
  CHECK(server->peer_alive());
  kill(child, SIGKILL);
  // Not reaped yet: a zombie must still count as gone.
  const auto t0 = std::chrono::steady_clock::now();
  while (server->peer_alive() && tally_test::seconds_since(t0) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(!server->peer_alive());
  auto client = Segment::open(name);
  CHECK_EQ(server->client_pid(), getpid());
  int status;
  waitpid(child, &status, 0);
  server->unlink();
  close(ready[0]);
  close(ready[1]);
}

}  // namespace

int main() {
  tally_test::run_case("create_sets_mode_0600_and_layout", create_sets_mode_0600_and_layout);
  tally_test::run_case("create_refuses_bad_arguments", create_refuses_bad_arguments);
  tally_test::run_case("open_validates_header", open_validates_header);
  tally_test::run_case("open_validates_indices", open_validates_indices);
  tally_test::run_case("open_rejects_short_file", open_rejects_short_file);
  tally_test::run_case("one_live_client_at_a_time", one_live_client_at_a_time);
  return tally_test::finish("test_transport_segment");
}
