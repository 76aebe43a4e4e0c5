// Slots of a private table that tally has no meaning for. A newer cudart may call
// further into a table than any cudart we measured (cudart 13.2 calls slot 12 of the
// runtime interface; 13.0 never did), and a null or missing slot is a jump to
// garbage. So every table is padded to kPaddedSlots, and each slot we do not know
// logs its table, index and first arguments once and answers CUDA_SUCCESS: the
// slots seen so far are optional checks whose failure makes cudart give up on the
// device, and a logged success can be diagnosed where a crash in cudart cannot.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "driver_headers.h"
#include "logging/log.h"
#include "entry_points/unsupported.h"

namespace tally::client::export_tables {

// 64: the deepest slot any cudart we read calls is 51 (the tools context table).
constexpr int kPaddedSlots = 64;

template <const char* kTableName, int kSlot, CUresult kAnswer>
CUresult unknown_slot(uintptr_t a, uintptr_t b, uintptr_t c) {
  static OnceFlag logged;
  if (logged.first()) {
    log_error("a library called slot %d of the %s export table, which tally does not implement "
              "(arguments %#lx %#lx %#lx); answering %s",
              kSlot, kTableName, static_cast<unsigned long>(a), static_cast<unsigned long>(b),
              static_cast<unsigned long>(c), kAnswer == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_NOT_SUPPORTED");
  }
  return kAnswer;
}

template <const char* kTableName, CUresult kAnswer, size_t... kIndex>
std::array<const void*, kPaddedSlots> unknown_slots(std::index_sequence<kIndex...>) {
  return {reinterpret_cast<const void*>(&unknown_slot<kTableName, static_cast<int>(kIndex), kAnswer>)...};
}

// A table of kPaddedSlots pointers. With a size header (the real driver's convention
// for most tables) slot 0 holds the table's size in bytes and `known` fills slots
// 1..; without one `known` starts at slot 0. A null in `known` and every slot after
// it is an unknown_slot answering kAnswer (CUDA_SUCCESS for cudart's optional checks;
// a table whose slots tally cannot honour answers CUDA_ERROR_NOT_SUPPORTED).
template <const char* kTableName, CUresult kAnswer = CUDA_SUCCESS>
class PaddedTable {
 public:
  enum Header { kSizeHeader, kNoHeader };

  PaddedTable(Header header, std::initializer_list<const void*> known) {
    const auto unknown = unknown_slots<kTableName, kAnswer>(std::make_index_sequence<kPaddedSlots>{});
    for (int i = 0; i < kPaddedSlots; ++i) slots_[i] = unknown[i];
    int at = 0;
    if (header == kSizeHeader) slots_[at++] = reinterpret_cast<const void*>(sizeof slots_);
    for (const void* slot : known) {
      if (slot != nullptr) slots_[at] = slot;
      ++at;
    }
  }

  const void* const* slots() const { return slots_; }

 private:
  const void* slots_[kPaddedSlots];
};

}  // namespace tally::client::export_tables
