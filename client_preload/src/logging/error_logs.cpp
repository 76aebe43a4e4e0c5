// cuLogs*: a message log with the driver's documented behaviour. Messages get
// consecutive sequence numbers; an iterator is the number of the next message to
// read. The buffer keeps at most kCapacity bytes, dropping the oldest messages; a
// dump that starts before the oldest kept message says how many were lost.
#include "logging/error_logs.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "entry_points/entry_point.h"

struct CUlogsCallbackEntry_st {
  CUlogsCallback function;
  void* data;
};

namespace tally::client {
namespace {

constexpr size_t kCapacity = 25600;  // the driver's documented maximum

class ErrorLog {
 public:
  void append(const char* message, size_t length) {
    std::vector<CUlogsCallbackEntry_st> callbacks;
    std::string text(message, length);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bytes_ += text.size() + 1;
      messages_.push_back(text);
      while (bytes_ > kCapacity && messages_.size() > 1) {
        bytes_ -= messages_.front().size() + 1;
        messages_.pop_front();
        ++first_kept_;
      }
      for (const auto& entry : callbacks_) callbacks.push_back(entry);
    }
    for (const auto& entry : callbacks) entry.function(entry.data, CU_LOG_LEVEL_ERROR, text.data(), text.size());
  }

  CUlogsCallbackEntry_st* add_callback(CUlogsCallback function, void* data) {
    std::lock_guard<std::mutex> lock(mutex_);
    callbacks_.push_back({function, data});
    return &callbacks_.back();
  }

  bool remove_callback(CUlogsCallbackEntry_st* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = callbacks_.begin(); it != callbacks_.end(); ++it) {
      if (&*it == handle) {
        callbacks_.erase(it);
        return true;
      }
    }
    return false;
  }

  CUlogIterator next() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<CUlogIterator>(first_kept_ + messages_.size());
  }

  // The messages from `iterator` on (all kept ones when null), oldest first, with
  // a note in front when some of them were dropped, and the iterator past them.
  std::pair<std::vector<std::string>, CUlogIterator> read(const CUlogIterator* iterator) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t end = first_kept_ + messages_.size();
    uint64_t from = iterator != nullptr ? *iterator : first_kept_;
    std::vector<std::string> out;
    if (from < first_kept_) {
      out.push_back("[" + std::to_string(first_kept_ - from) + " earlier log messages were overwritten]");
      from = first_kept_;
    }
    for (uint64_t i = from; i < end; ++i) out.push_back(messages_[i - first_kept_]);
    return {std::move(out), static_cast<CUlogIterator>(end)};
  }

 private:
  std::mutex mutex_;
  std::deque<std::string> messages_;
  uint64_t first_kept_ = 0;  // sequence number of messages_.front()
  size_t bytes_ = 0;         // kept text, one newline per message included
  std::list<CUlogsCallbackEntry_st> callbacks_;  // stable addresses: they are the handles
};

// Never destroyed: messages can come from other libraries' destructors at exit.
ErrorLog& error_log() {
  static ErrorLog* log = new ErrorLog;
  return *log;
}

// A callback that itself causes a message must not recurse into the callbacks.
thread_local bool t_in_callback = false;

}  // namespace

void record_error_log(const char* message, size_t length) {
  if (t_in_callback) return;
  t_in_callback = true;
  error_log().append(message, length);
  t_in_callback = false;
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuLogsRegisterCallback_v12090)(CUlogsCallback callbackFunc, void* userData,
                                           CUlogsCallbackHandle* callback_out) {
  if (callbackFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUlogsCallbackEntry_st* handle = error_log().add_callback(callbackFunc, userData);
  if (callback_out != nullptr) *callback_out = handle;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuLogsUnregisterCallback_v12090)(CUlogsCallbackHandle callback) {
  return callback != nullptr && error_log().remove_callback(callback) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TALLY_ENTRY(cuLogsCurrent_v12090)(CUlogIterator* iterator_out, unsigned int flags) {
  if (iterator_out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *iterator_out = error_log().next();
  return CUDA_SUCCESS;
}

// As documented: newline-separated messages, NUL-terminated, *size the bytes
// written without the NUL. When not all fit, a note goes first and as many of the
// newest messages as fit follow it; when not even one fits, *size is 0 and the
// call fails.
TALLY_ENTRY(cuLogsDumpToMemory_v12090)(CUlogIterator* iterator, char* buffer, size_t* size, unsigned int flags) {
  if (buffer == nullptr || size == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t room = *size;
  auto [messages, end] = error_log().read(iterator);
  auto bytes_of = [&messages](size_t from) {
    size_t n = 0;
    for (size_t i = from; i < messages.size(); ++i) n += messages[i].size() + 1;
    return n;
  };
  std::string out;
  if (bytes_of(0) < room || messages.empty()) {
    for (const auto& m : messages) out += m + "\n";
  } else {
    size_t from = 0;
    std::string note;
    do {
      ++from;
      note = "[" + std::to_string(from) + " log messages did not fit]\n";
    } while (from < messages.size() && note.size() + bytes_of(from) >= room);
    if (from >= messages.size()) {
      *size = 0;
      if (room > 0) buffer[0] = '\0';
      return CUDA_ERROR_INVALID_VALUE;
    }
    out = note;
    for (size_t i = from; i < messages.size(); ++i) out += messages[i] + "\n";
  }
  if (room == 0) {  // nothing to write, and not even room for the terminator
    *size = 0;
    return messages.empty() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  std::memcpy(buffer, out.data(), out.size());
  buffer[out.size()] = '\0';
  *size = out.size();
  if (iterator != nullptr) *iterator = end;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuLogsDumpToFile_v12090)(CUlogIterator* iterator, const char* pathToFile, unsigned int flags) {
  if (pathToFile == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::FILE* file = std::fopen(pathToFile, "a");
  if (file == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto [messages, end] = error_log().read(iterator);
  bool ok = true;
  for (const auto& m : messages) ok = ok && std::fprintf(file, "%s\n", m.c_str()) >= 0;
  ok = std::fclose(file) == 0 && ok;
  if (!ok) return CUDA_ERROR_UNKNOWN;
  if (iterator != nullptr) *iterator = end;
  return CUDA_SUCCESS;
}
