// Tools runtime hooks (a094798c-...): slots 2 and 6 hand cudart two scratch buffers
// (pointer and size out-parameters). It rejects sizes below 1024 and 14 (measured).
#include "export_tables/export_tables.h"

namespace tally::client::export_tables {
namespace {

constexpr int kSlots = 7;

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

const void* const kTable[kSlots] = {
    reinterpret_cast<const void*>(sizeof(void*) * kSlots),
    nullptr,
    reinterpret_cast<const void*>(&hook_slots),
    nullptr,
    nullptr,
    nullptr,
    reinterpret_cast<const void*>(&hook_flags),
};

}  // namespace

Table tools_runtime_hooks() { return kTable; }

}  // namespace tally::client::export_tables
