// Device assert: the `__assertfail(message, file, line, function, char_size)`
// call nvcc emits where an `assert` fails.
//
// As on a GPU, every lane that reaches it prints CUDA's line
//   file:line: function: block: [x,y,z], thread: [x,y,z] Assertion `message` failed.
// (in lane order; the text goes to the launch's assert output, which the job
// gets on its stderr) and the launch ends with CUDA_ERROR_ASSERT.
//
// Operands: the frame offsets of the call's .param arguments, two per
// immediate: imm = message | file << 32, imm2 = line | function << 32.
#include <cstdio>
#include <string>

#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

constexpr size_t kMaxStringBytes = 4096;

std::string read_string(Exec& e, uint64_t addr, int lane) {
  std::string s;
  if (addr == 0) return "";
  for (size_t i = 0; i < kMaxStringBytes; ++i) {
    char c = static_cast<char>(*e.generic(addr + i, 1, lane));
    if (c == '\0') break;
    s.push_back(c);
  }
  return s;
}

template <class T>
T frame_value(Exec& e, uint64_t frame, uint32_t offset, int lane) {
  T v;
  std::memcpy(&v, e.local(frame + offset, sizeof(T), lane), sizeof(T));
  return v;
}

EMU_HANDLER(h_assertfail) {
  uint64_t frame = e.frame_local_base();
  const auto message_at = static_cast<uint32_t>(in.imm), file_at = static_cast<uint32_t>(in.imm >> 32);
  const auto line_at = static_cast<uint32_t>(in.imm2), function_at = static_cast<uint32_t>(in.imm2 >> 32);
  const LaunchConfig& c = e.launch->cfg;
  const Block& B = e.launch->block;
  std::string first_message;
  for_lanes(m, [&](int l) {
    std::string message = read_string(e, frame_value<uint64_t>(e, frame, message_at, l), l);
    std::string file = read_string(e, frame_value<uint64_t>(e, frame, file_at, l), l);
    std::string function = read_string(e, frame_value<uint64_t>(e, frame, function_at, l), l);
    uint32_t line = frame_value<uint32_t>(e, frame, line_at, l);
    uint32_t t = e.warp->index * kWarpSize + static_cast<uint32_t>(l);
    char where[160];
    std::snprintf(where, sizeof where, ":%u: ", line);
    char ids[160];
    std::snprintf(ids, sizeof ids, ": block: [%u,%u,%u], thread: [%u,%u,%u] Assertion `", B.ctaid[0], B.ctaid[1],
                  B.ctaid[2], t % c.block[0], (t / c.block[0]) % c.block[1], t / (c.block[0] * c.block[1]));
    e.launch->assert_output += file + where + function + ids + message + "` failed.\n";
    if (first_message.empty()) first_message = "`" + message + "` (" + file + where + function + ")";
  });
  fault(kAssert, "device-side assertion " + first_message + " failed", __builtin_ctz(m));
}

const HandlerRegistrar registrar{EMU_ENTRY("assertfail", h_assertfail)};

}  // namespace
}  // namespace tally::emu
