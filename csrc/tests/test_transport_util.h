// Minimal checking for the transport's C++ test executables: each CHECK that fails
// prints where and why and the executable exits non-zero; on success it prints
// "<name>: <n> checks passed", which tests/test_core_cpp.py looks for.
#pragma once
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <unistd.h>

namespace tally_test {

inline std::atomic<int>& checks_passed() {
  static std::atomic<int> n{0};
  return n;
}

[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// A name no other test run uses, so parallel runs never collide.
inline std::string unique_segment_name(const char* tag) {
  static int counter = 0;
  return "/tally-t-" + std::to_string(getpid()) + "-" + tag + "-" + std::to_string(++counter);
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of the calling thread: what a waiter burns, however loaded the machine.
inline double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Runs one named test case and reports it.
inline void run_case(const char* name, const std::function<void()>& body) {
  const auto t0 = std::chrono::steady_clock::now();
  body();
  std::printf("  %-48s ok (%.3f s)\n", name, seconds_since(t0));
  std::fflush(stdout);
}

inline int finish(const char* program) {
  std::printf("%s: %d checks passed\n", program, checks_passed().load());
  return 0;
}

}  // namespace tally_test

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) tally_test::fail(__FILE__, __LINE__, #cond);        \
    ++tally_test::checks_passed();                                   \
  } while (0)

#define CHECK_EQ(a, b)                                                                              \
  do {                                                                                              \
    const auto va_ = (a);                                                                           \
    const auto vb_ = (b);                                                                           \
    if (!(va_ == vb_))                                                                              \
      tally_test::fail(__FILE__, __LINE__,                                                          \
                       std::string(#a " == " #b ": ") + std::to_string(va_) + " != " + std::to_string(vb_)); \
    ++tally_test::checks_passed();                                                                  \
  } while (0)

// Checks that `expr` throws `Exc` whose message contains `needle`.
#define CHECK_THROWS(Exc, needle, expr)                                                        \
  do {                                                                                         \
    bool thrown_ = false;                                                                      \
    try {                                                                                      \
      (void)(expr);                                                                            \
    } catch (const Exc& e_) {                                                                  \
      thrown_ = true;                                                                          \
      if (std::string(e_.what()).find(needle) == std::string::npos)                            \
        tally_test::fail(__FILE__, __LINE__, std::string("message lacks '") + needle + "': " + e_.what()); \
    }                                                                                          \
    if (!thrown_) tally_test::fail(__FILE__, __LINE__, #expr " did not throw " #Exc);          \
    ++tally_test::checks_passed();                                                             \
  } while (0)
