// Device printf: the `vprintf(format, args)` call nvcc emits for printf.
//
// The format is a generic pointer to a string in global memory; args points to
// a buffer (usually in the thread's local memory) holding the arguments packed
// at their natural alignment, with floats promoted to double, as CUDA packs
// them. Output is formatted like the host's printf and appended to the
// launch's printf buffer, one call after another in lane order.
//
// Operands: imm = frame offset of the format parameter, imm2 = frame offset of
// the args parameter, target = frame offset of the return value (or -1).
// Like CUDA's, the call returns the number of arguments it consumed.
#include <cctype>
#include <cstdio>
#include <string>

#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

constexpr size_t kMaxStringBytes = 4096;

std::string read_string(Exec& e, uint64_t addr, int lane) {
  std::string s;
  if (addr == 0) return "(null)";
  for (size_t i = 0; i < kMaxStringBytes; ++i) {
    char c = static_cast<char>(*e.generic(addr + i, 1, lane));
    if (c == '\0') break;
    s.push_back(c);
  }
  return s;
}

class ArgReader {
 public:
  ArgReader(Exec& e, uint64_t base, int lane) : e_(e), base_(base), lane_(lane) {}
  uint64_t next(unsigned size) {
    offset_ = (offset_ + size - 1) / size * size;
    uint64_t v = 0;
    std::memcpy(&v, e_.generic(base_ + offset_, size, lane_), size);
    offset_ += size;
    ++count_;
    return v;
  }
  int count() const { return count_; }

 private:
  Exec& e_;
  uint64_t base_;
  int lane_;
  uint64_t offset_ = 0;
  int count_ = 0;
};

template <class T>
void append_formatted(std::string& out, const std::string& spec, T value) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, spec.c_str(), value);
  if (n < 0) return;
  if (static_cast<size_t>(n) < sizeof buf) {
    out.append(buf, n);
  } else {
    std::string big(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(big.data(), big.size(), spec.c_str(), value);
    big.resize(n);
    out += big;
  }
}

int format_into(std::string& out, Exec& e, const std::string& fmt, uint64_t args, int lane) {
  ArgReader reader(e, args, lane);
  size_t i = 0;
  while (i < fmt.size()) {
    char ch = fmt[i];
    if (ch != '%') {
      out.push_back(ch);
      ++i;
      continue;
    }
    size_t start = i++;
    if (i < fmt.size() && fmt[i] == '%') {
      out.push_back('%');
      ++i;
      continue;
    }
    std::string flags_width;
    while (i < fmt.size() && std::string("-+ #0").find(fmt[i]) != std::string::npos) flags_width += fmt[i++];
    while (i < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[i])) || fmt[i] == '.')) flags_width += fmt[i++];
    int longs = 0;
    bool is_short = false;
    while (i < fmt.size() && std::string("hlLzjt").find(fmt[i]) != std::string::npos) {
      if (fmt[i] == 'h') is_short = true;
      else ++longs;
      ++i;
    }
    if (i >= fmt.size()) {
      out.append(fmt, start, std::string::npos);
      break;
    }
    char conv = fmt[i++];
    std::string spec = "%" + flags_width;
    switch (conv) {
      case 'd': case 'i': {
        if (longs) {
          append_formatted(out, spec + "lld", static_cast<long long>(reader.next(8)));
        } else {
          auto v = static_cast<int32_t>(reader.next(4));
          append_formatted(out, spec + "d", is_short ? static_cast<int>(static_cast<int16_t>(v)) : v);
        }
        break;
      }
      case 'u': case 'o': case 'x': case 'X': {
        if (longs) {
          append_formatted(out, spec + "ll" + conv, static_cast<unsigned long long>(reader.next(8)));
        } else {
          auto v = static_cast<uint32_t>(reader.next(4));
          append_formatted(out, spec + conv, is_short ? static_cast<unsigned>(static_cast<uint16_t>(v)) : v);
        }
        break;
      }
      case 'c':
        append_formatted(out, spec + "c", static_cast<int>(reader.next(4)));
        break;
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
        append_formatted(out, spec + conv, get<double>(reader.next(8)));
        break;
      case 's':
        append_formatted(out, spec + "s", read_string(e, reader.next(8), lane).c_str());
        break;
      case 'p':
        append_formatted(out, spec + "p", reinterpret_cast<void*>(reader.next(8)));
        break;
      default:  // not a conversion CUDA knows: print it as written
        out.append(fmt, start, i - start);
        break;
    }
  }
  return reader.count();
}

EMU_HANDLER(h_vprintf) {
  uint64_t frame = e.frame_local_base();
  for_lanes(m, [&](int l) {
    uint64_t fmt_ptr, args_ptr;
    std::memcpy(&fmt_ptr, e.local(frame + static_cast<uint64_t>(in.imm), 8, l), 8);
    std::memcpy(&args_ptr, e.local(frame + static_cast<uint64_t>(in.imm2), 8, l), 8);
    std::string fmt = read_string(e, fmt_ptr, l);
    int count = format_into(e.launch->printf_output, e, fmt, args_ptr, l);
    if (in.target >= 0) {
      int32_t r = count;
      std::memcpy(e.local(frame + static_cast<uint64_t>(in.target), 4, l), &r, 4);
    }
  });
}

const HandlerRegistrar registrar{EMU_ENTRY("vprintf", h_vprintf)};

}  // namespace
}  // namespace tally::emu
