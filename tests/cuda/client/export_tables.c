// Calls every slot of every private export table tally hands out, past the slots
// any measured cudart uses, the way a newer cudart might: each must be a function
// (never a null or garbage pointer), and the ones tally does not know answer 0.
// Prints "size <table> <bytes>" for tables with a size header and
// "slot <table> <index> <result>" for each unknown slot called.
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*UnknownSlot)(uintptr_t, uintptr_t, uintptr_t);

struct Known {
  const char* name;
  unsigned char uuid[16];
  int sized;          // slot 0 is the table's size in bytes
  int first_unknown;  // slots from here on have no meaning in tally
};

static const struct Known kTables[] = {
    {"runtime_interface",
     {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}, 1, 9},
    {"tools_runtime_hooks",
     {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}, 1, 7},
    {"tools_tls", {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}, 1, 1},
    {"context_local_storage",
     {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}, 0, 3},
    {"context_checks",
     {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}, 1, 4},
    {"integrity_check",
     {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}, 1, 2},
    {"tools_context",
     {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}, 1, 1},
    {"fft_kernels",
     {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}, 1, 1},
};

int main(void) {
  for (size_t t = 0; t < sizeof kTables / sizeof kTables[0]; ++t) {
    const struct Known* known = &kTables[t];
    CUuuid id;
    memcpy(id.bytes, known->uuid, sizeof id.bytes);
    const void* const* table = NULL;
    CUresult rc = cuGetExportTable((const void**)&table, &id);
    if (rc != CUDA_SUCCESS || table == NULL) {
      printf("missing %s %d\n", known->name, (int)rc);
      continue;
    }
    size_t slots = 64;  // the padding of every table (unknown_slot.h)
    if (known->sized) {
      printf("size %s %zu\n", known->name, (size_t)(uintptr_t)table[0]);
      slots = (size_t)(uintptr_t)table[0] / sizeof(void*);
    }
    for (size_t i = (size_t)known->first_unknown; i < slots; ++i) {
      UnknownSlot slot = (UnknownSlot)(uintptr_t)table[i];
      // Twice: the second call must not log again.
      CUresult first = slot(1, 2, 3);
      CUresult second = slot(4, 5, 6);
      printf("slot %s %zu %d\n", known->name, i, first == second ? (int)first : -1);
    }
  }
  return 0;
}
