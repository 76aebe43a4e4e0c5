// The driver error log (cuLogs*) as tally keeps it: tally's own messages (here:
// that two entry points are not supported) reach a registered callback and the
// dump calls. Needs no server. Prints key=value lines.
#include <cuda.h>
#include <stdio.h>
#include <string.h>

static int g_calls;
static char g_last[512];
static void* g_data;

static void on_log(void* data, CUlogLevel level, char* message, size_t length) {
  ++g_calls;
  g_data = data;
  snprintf(g_last, sizeof g_last, "%d:%.*s", (int)level, (int)length, message);
}

int main(int argc, char** argv) {
  CUresult rc;
  CUlogIterator start = 99;
  rc = cuLogsCurrent(&start, 0);
  printf("current=%d start=%u\n", (int)rc, start);
  printf("current_bad_flags=%d\n", (int)cuLogsCurrent(&start, 1));
  CUlogsCallbackHandle handle = NULL;
  printf("register=%d\n", (int)cuLogsRegisterCallback(on_log, &g_calls, &handle));
  CUmipmappedArray array;
  CUDA_ARRAY3D_DESCRIPTOR desc = {64, 64, 0, CU_AD_FORMAT_FLOAT, 1, 0};
  cuMipmappedArrayCreate(&array, &desc, 4);  // not supported: one message
  cuMipmappedArrayCreate(&array, &desc, 4);  // reported once per function: no second message
  printf("callback_calls=%d data_ok=%d\n", g_calls, g_data == &g_calls);
  printf("callback_message=%s\n", g_last);

  char buffer[4096];
  size_t size = sizeof buffer;
  CUlogIterator it = start;
  rc = cuLogsDumpToMemory(&it, buffer, &size, 0);
  printf("dump=%d size_matches=%d advanced=%u\n", (int)rc, size == strlen(buffer), it - start);
  printf("dump_text=%.*s\n", (int)strcspn(buffer, "\n"), buffer);
  size = sizeof buffer;
  rc = cuLogsDumpToMemory(&it, buffer, &size, 0);
  printf("dump_again=%d size=%zu\n", (int)rc, size);

  printf("unregister=%d\n", (int)cuLogsUnregisterCallback(handle));
  printf("unregister_again=%d\n", (int)cuLogsUnregisterCallback(handle));
  cuGraphicsUnregisterResource(NULL);  // a second message, not seen by the callback
  printf("callback_calls_after=%d\n", g_calls);

  // Both messages, newest last; then too small a buffer for both.
  size = sizeof buffer;
  rc = cuLogsDumpToMemory(NULL, buffer, &size, 0);
  int lines = 0;
  for (const char* c = buffer; *c != '\0'; ++c) lines += *c == '\n';
  printf("dump_all=%d lines=%d\n", (int)rc, lines);
  char small[320];  // the newest message (with its reason) and the note fit; both messages do not
  size = sizeof small;
  rc = cuLogsDumpToMemory(NULL, small, &size, 0);
  printf("dump_small=%d note=%d newest=%d\n", (int)rc, strncmp(small, "[1 log messages did not fit]", 28) == 0,
         strstr(small, "cuGraphicsUnregisterResource") != NULL);
  char tiny[8];
  size = sizeof tiny;
  rc = cuLogsDumpToMemory(NULL, tiny, &size, 0);
  printf("dump_tiny=%d size=%zu\n", (int)rc, size);

  it = start;
  rc = cuLogsDumpToFile(&it, argv[1], 0);
  printf("dump_file=%d advanced=%u\n", (int)rc, it - start);
  return argc > 1 ? 0 : 1;
}
