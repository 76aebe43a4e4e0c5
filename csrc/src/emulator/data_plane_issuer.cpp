// The emulator's issuer: NativeOps onto the stream's C++ queue
// (csrc/src/emulator/stream_queue.h), after the checks the Python backend
// makes before it queues the same work (tally/backends/emulator/backend.py);
// whatever they would refuse goes to Python, which refuses it with its message.
#include "emulator/data_plane_issuer.h"

#include "emulator/stream_queue.h"

namespace tally::data_plane {

namespace {

emu::StreamQueue& queue_of(uint64_t stream) { return *reinterpret_cast<emu::StreamQueue*>(stream); }

// The cluster shape the launch runs with, as tally/backends/clusters.py decides it
// (false: a launch that backend refuses, which Python then refuses with its reason).
bool cluster_of(const FunctionEntry& fn, const LaunchShape& s, uint32_t cluster[3], bool* explicit_cluster) {
  const bool asked = s.cluster[0] != 0 || s.cluster[1] != 0 || s.cluster[2] != 0;
  const bool required = fn.required_cluster[0] != 0;
  uint64_t blocks = 1;
  for (int i = 0; i < 3; ++i) {
    if (asked && required && s.cluster[i] != fn.required_cluster[i]) return false;
    cluster[i] = asked ? s.cluster[i] : required ? fn.required_cluster[i] : 1;
    if (cluster[i] == 0 || s.grid[i] % cluster[i] != 0) return false;
    blocks *= cluster[i];
  }
  if (!asked && !required && fn.explicit_cluster) return false;
  *explicit_cluster = asked || required;
  return blocks <= emu::kMaxClusterBlocks;
}

}  // namespace

EmulatorIssuer::EmulatorIssuer(std::shared_ptr<emu::DeviceMemory> memory, uint32_t sm_count, uint64_t max_warp_steps,
                               double timeout_seconds, std::shared_ptr<emu::CancelFlag> cancel, LaunchLimits limits)
    : memory_(std::move(memory)), sm_count_(sm_count), max_warp_steps_(max_warp_steps),
      timeout_seconds_(timeout_seconds), cancel_(std::move(cancel)), limits_(limits) {}

bool EmulatorIssuer::owned(uint64_t addr, uint64_t nbytes) {
  emu::DeviceMemory::Use use(*memory_);
  try {
    memory_->checked(addr, nbytes, "data plane");
  } catch (const emu::MemoryError&) {
    return false;
  }
  return true;
}

bool EmulatorIssuer::launch(uint64_t stream, const FunctionEntry& fn, const LaunchShape& s, const uint8_t* params,
                            uint32_t param_bytes, uint32_t sm_cap) {
  auto program = std::static_pointer_cast<emu::Program>(fn.object);
  if (!program || sm_cap > sm_count_) return false;
  uint64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (s.grid[i] > limits_.max_grid[i] || s.block[i] > limits_.max_block[i]) return false;
    threads *= s.block[i];
    if (fn.required_block[0] && s.block[i] != fn.required_block[i]) return false;
  }
  if (threads > limits_.max_threads || (fn.max_threads && threads > fn.max_threads)) return false;
  if (s.shared_bytes > limits_.max_shared_bytes ||
      uint64_t{fn.static_shared_bytes} + s.shared_bytes > limits_.max_shared_bytes)
    return false;
  if (param_bytes < program->param_bytes) return false;
  uint32_t cluster[3];
  bool explicit_cluster;
  if (!cluster_of(fn, s, cluster, &explicit_cluster)) return false;
  auto op = std::make_shared<emu::NativeOp>();
  op->kind = emu::NativeOp::Kind::kLaunch;
  op->memory = memory_;
  op->program = std::move(program);
  op->params.assign(reinterpret_cast<const char*>(params), param_bytes);
  for (int i = 0; i < 3; ++i) {
    op->config.grid[i] = s.grid[i];
    op->config.block[i] = s.block[i];
  }
  for (int i = 0; i < 3; ++i) op->config.cluster[i] = cluster[i];
  op->config.explicit_cluster = explicit_cluster;
  op->config.dynamic_shared = s.shared_bytes;
  op->config.sm_count = sm_count_;
  op->config.sm_cap = sm_cap;
  op->config.max_warp_steps = max_warp_steps_;
  op->config.timeout_seconds = timeout_seconds_;
  op->cancel = cancel_;
  queue_of(stream).push(emu::StreamQueue::Item{nullptr, std::move(op), false});
  return true;
}

bool EmulatorIssuer::memset(uint64_t stream, uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count) {
  if (!owned(dst, count * element_size)) return false;
  auto op = std::make_shared<emu::NativeOp>();
  op->kind = emu::NativeOp::Kind::kMemset;
  op->memory = memory_;
  op->dst = dst;
  op->value = value;
  op->element_size = element_size;
  op->count = count;
  queue_of(stream).push(emu::StreamQueue::Item{nullptr, std::move(op), false});
  return true;
}

bool EmulatorIssuer::copy_dtod(uint64_t stream, uint64_t dst, uint64_t src, uint64_t nbytes) {
  if (!owned(src, nbytes) || !owned(dst, nbytes)) return false;
  auto op = std::make_shared<emu::NativeOp>();
  op->kind = emu::NativeOp::Kind::kCopyDtoD;
  op->memory = memory_;
  op->dst = dst;
  op->src = src;
  op->count = nbytes;
  queue_of(stream).push(emu::StreamQueue::Item{nullptr, std::move(op), false});
  return true;
}

bool EmulatorIssuer::copy_htod(uint64_t stream, uint64_t dst, const uint8_t* src, uint64_t nbytes) {
  if (!owned(dst, nbytes)) return false;
  auto op = std::make_shared<emu::NativeOp>();
  op->kind = emu::NativeOp::Kind::kCopyHtoD;
  op->memory = memory_;
  op->dst = dst;
  op->bytes.assign(reinterpret_cast<const char*>(src), nbytes);
  queue_of(stream).push(emu::StreamQueue::Item{nullptr, std::move(op), false});
  return true;
}

bool EmulatorIssuer::stream_quiet(uint64_t stream) { return queue_of(stream).quiet(); }

}  // namespace tally::data_plane
