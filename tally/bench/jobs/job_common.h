// Shared by the co-location benchmark's CUDA job programs (tally/bench/jobs/*.cu):
// command-line flags, the clock, the ready/stop files and the JSON report.
//
// Every time is CLOCK_MONOTONIC seconds (std::chrono::steady_clock on Linux), the
// clock Python's time.monotonic() reads, so the runner can put the timestamps of
// several processes on one time line.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <vector>

#define JOB_CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
  std::fprintf(stderr, "%s: %s failed: %s\n", job::program_name, #call, cudaGetErrorString(e_)); \
  std::exit(1); } } while (0)

namespace job {

inline const char* program_name = "job";

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Flags are "--name value"; an unknown flag is an error so that a typo in
// --hp-args/--be-args is not silently ignored.
class Flags {
 public:
  Flags(int argc, char** argv, std::vector<std::string> known) : known_(std::move(known)) {
    for (int i = 1; i < argc; ++i) {
      std::string name = argv[i];
      bool ok = name.rfind("--", 0) == 0 && i + 1 < argc;
      bool listed = false;
      for (const auto& k : known_) listed = listed || name == "--" + k;
      if (!ok || !listed) {
        std::fprintf(stderr, "%s: unexpected argument %s; flags (each followed by a value):", program_name,
                     name.c_str());
        for (const auto& k : known_) std::fprintf(stderr, " --%s", k.c_str());
        std::fprintf(stderr, "\n");
        std::exit(2);
      }
      names_.push_back(name.substr(2));
      values_.push_back(argv[++i]);
    }
  }
  std::string str(const char* name, const char* fallback) const {
    for (size_t i = names_.size(); i-- > 0;)
      if (names_[i] == name) return values_[i];
    if (fallback == nullptr) {
      std::fprintf(stderr, "%s: --%s is required\n", program_name, name);
      std::exit(2);
    }
    return fallback;
  }
  double num(const char* name, double fallback) const {
    std::string s = str(name, "");
    if (s.empty()) return fallback;
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0') {
      std::fprintf(stderr, "%s: --%s needs a number, got %s\n", program_name, name, s.c_str());
      std::exit(2);
    }
    return v;
  }
  long whole(const char* name, long fallback, long min_value) const {
    double v = num(name, double(fallback));
    if (v != double(long(v)) || long(v) < min_value) {
      std::fprintf(stderr, "%s: --%s needs a whole number >= %ld, got %g\n", program_name, name, min_value, v);
      std::exit(2);
    }
    return long(v);
  }

 private:
  std::vector<std::string> known_, names_, values_;
};

inline bool file_exists(const std::string& path) {
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

inline void touch(const std::string& path) {
  if (path.empty()) return;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "%s: cannot create %s\n", program_name, path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

// A flat JSON object: numbers, strings, arrays of numbers. Written to
// PATH.tmp and renamed, so the runner never reads half a report.
class Report {
 public:
  void number(const char* key, double v) { add(key, fmt(v)); }
  void text(const char* key, const std::string& v) {
    std::string quoted = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') quoted += '\\';
      if (c == '\n') { quoted += "\\n"; continue; }
      quoted += c;
    }
    add(key, quoted + "\"");
  }
  void boolean(const char* key, bool v) { add(key, v ? "true" : "false"); }
  void numbers(const char* key, const std::vector<double>& vs) {
    std::string s = "[";
    for (size_t i = 0; i < vs.size(); ++i) s += (i ? "," : "") + fmt(vs[i]);
    add(key, s + "]");
  }
  void write(const std::string& path) const {
    std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "%s: cannot write %s\n", program_name, tmp.c_str());
      std::exit(1);
    }
    std::fprintf(f, "{%s}\n", body_.c_str());
    std::fclose(f);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "%s: cannot rename %s to %s\n", program_name, tmp.c_str(), path.c_str());
      std::exit(1);
    }
  }

 private:
  static std::string fmt(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9f", v);
    return buf;
  }
  void add(const char* key, const std::string& value) {
    body_ += (body_.empty() ? "\"" : ",\"") + std::string(key) + "\":" + value;
  }
  std::string body_;
};

// Deterministic values in [-1, 1) from an index (no host RNG state to keep in step).
inline float hashed_unit(unsigned long long i, unsigned long long salt) {
  unsigned long long x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (salt * 0xC2B2AE3D27D4EB4Full);
  x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 27; x *= 0x94D049BB133111EBull; x ^= x >> 31;
  return float((x >> 40) & 0xFFFFFF) / float(1 << 23) - 1.0f;
}

}  // namespace job
