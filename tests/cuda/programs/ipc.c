// Interprocess handles between two jobs of one tally-server (driver API):
//   ipc owner       allocates 1 MiB filled with 0x11111111, records an interprocess
//                   event after a second fill (0x22222222) on a stream, prints both
//                   handles as hex, waits for a line on stdin, prints what the other
//                   job wrote into the first word, then frees the memory and waits for
//                   a second line before exiting
//   ipc importer MEM EVENT   opens both handles, waits on the event, reads the
//                   memory, writes 0x33333333 into the first word, tries what it
//                   must not (free the owner's memory, open its own handle, a forged
//                   handle), and closes the memory handle
//   ipc holder MEM  opens the memory, prints its first word, waits for a line on
//                   stdin (the owner frees meanwhile), reads again, closes
// Prints key=value lines; exits 0 unless the setup itself fails.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_check.h"

enum { kBytes = 1 << 20 };

static void print_hex(const char* key, const void* bytes, size_t n) {
  printf("%s=", key);
  for (size_t i = 0; i < n; ++i) printf("%02x", ((const unsigned char*)bytes)[i]);
  printf("\n");
}

static void parse_hex(const char* text, void* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) sscanf(text + 2 * i, "%2hhx", (unsigned char*)bytes + i);
}

static void wait_line(void) {
  char line[16];
  if (!fgets(line, sizeof line, stdin)) exit(1);
}

static unsigned first_word(CUdeviceptr p) {
  unsigned v = 0;
  CHECK(cuMemcpyDtoH(&v, p, sizeof v));
  return v;
}

static void owner(void) {
  CUdeviceptr mem;
  CUstream stream;
  CUevent done;
  CHECK(cuMemAlloc(&mem, kBytes));
  CHECK(cuMemsetD32(mem, 0x11111111u, kBytes / 4));
  // cuMemsetD32 may return before the fill lands, and a non-blocking stream does not
  // wait for the legacy one: without this the two fills can land in either order.
  CHECK(cuCtxSynchronize());
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS));
  CHECK(cuMemsetD32Async(mem, 0x22222222u, kBytes / 4, stream));
  CHECK(cuEventRecord(done, stream));
  CUipcMemHandle mh;
  CUipcEventHandle eh;
  CHECK(cuIpcGetMemHandle(&mh, mem));
  CHECK(cuIpcGetEventHandle(&eh, done));
  CUevent timed;
  CHECK(cuEventCreate(&timed, 0));
  printf("timed_event_handle=%d\n", (int)cuIpcGetEventHandle(&eh, timed) == CUDA_SUCCESS ? 0 : 1);
  CHECK(cuIpcGetEventHandle(&eh, done));
  CUdeviceptr own;
  printf("open_own=%d\n", (int)cuIpcOpenMemHandle(&own, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  print_hex("mem_handle", &mh, sizeof mh);
  print_hex("event_handle", &eh, sizeof eh);
  fflush(stdout);
  wait_line();
  printf("written_by_other=%08x\n", first_word(mem));
  CHECK(cuMemFree(mem));
  printf("freed=1\n");
  fflush(stdout);
  wait_line();
}

static void importer(const char* mem_hex, const char* event_hex) {
  CUipcMemHandle mh;
  CUipcEventHandle eh;
  parse_hex(mem_hex, &mh, sizeof mh);
  parse_hex(event_hex, &eh, sizeof eh);
  CUdeviceptr mem;
  CUevent done;
  CUstream stream;
  CHECK(cuIpcOpenMemHandle(&mem, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CHECK(cuIpcOpenEventHandle(&done, eh));
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamWaitEvent(stream, done, 0));
  unsigned* host = malloc(kBytes);
  CHECK(cuMemcpyDtoHAsync(host, mem, kBytes, stream));
  CHECK(cuStreamSynchronize(stream));
  int all = 1;
  for (int i = 0; i < kBytes / 4; ++i) all &= host[i] == 0x22222222u;
  printf("read_after_event=%d\n", all);
  CHECK(cuEventSynchronize(done));
  unsigned marker = 0x33333333u;
  CHECK(cuMemcpyHtoD(mem, &marker, sizeof marker));
  // A copy from pageable memory may return before it lands (CUDA's rule too): the
  // owner reads the word once this job has ended, so the write must have landed.
  CHECK(cuCtxSynchronize());
  printf("free_others=%d\n", (int)cuMemFree(mem));
  CUipcMemHandle forged = mh;
  ((unsigned char*)&forged)[20] ^= 0x5a;  // inside the secret
  CUdeviceptr nothing;
  printf("open_forged=%d\n", (int)cuIpcOpenMemHandle(&nothing, forged, 0));
  CHECK(cuEventDestroy(done));  // only forgets it here
  CHECK(cuIpcCloseMemHandle(mem));
  printf("copy_after_close=%d\n", (int)cuMemcpyHtoD(mem, &marker, sizeof marker));
  printf("close_twice=%d\n", (int)cuIpcCloseMemHandle(mem));
  free(host);
}

static void holder(const char* mem_hex) {
  CUipcMemHandle mh;
  parse_hex(mem_hex, &mh, sizeof mh);
  CUdeviceptr mem;
  CHECK(cuIpcOpenMemHandle(&mem, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  printf("held_first=%08x\n", first_word(mem));
  fflush(stdout);
  wait_line();
  printf("held_after_owner_freed=%08x\n", first_word(mem));
  CHECK(cuIpcCloseMemHandle(mem));
  printf("closed=1\n");
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  setup();
  if (strcmp(argv[1], "owner") == 0) owner();
  else if (strcmp(argv[1], "importer") == 0 && argc == 4) importer(argv[2], argv[3]);
  else if (strcmp(argv[1], "holder") == 0 && argc == 3) holder(argv[2]);
  else return 2;
  return 0;
}
