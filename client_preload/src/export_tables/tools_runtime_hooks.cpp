// Tools runtime hooks (a094798c-...): slots 2 and 6 hand cudart two scratch buffers
// (pointer and size out-parameters). It rejects sizes below 1024 and 14 (measured).
#include "export_tables/export_tables.h"
#include "export_tables/unknown_slot.h"

namespace tally::client::export_tables {
namespace {

constexpr char kName[] = "tools runtime hooks";

void* g_hook_slots[1024];          // reported as 1024 entries
unsigned char g_hook_flags[64];    // reported as 14 bytes; room to spare

void hook_slots(void** buffer, size_t* size) {
  *buffer = g_hook_slots;
  *size = sizeof(g_hook_slots) / sizeof(g_hook_slots[0]);
}

void hook_flags(void** buffer, size_t* size) {
  *buffer = g_hook_flags;
  *size = 14;
}

}  // namespace

Table tools_runtime_hooks() {
  static const PaddedTable<kName> table(PaddedTable<kName>::kSizeHeader,
                                        {nullptr, reinterpret_cast<const void*>(&hook_slots), nullptr, nullptr,
                                         nullptr, reinterpret_cast<const void*>(&hook_flags)});
  return table.slots();
}

}  // namespace tally::client::export_tables
