// GPU core dump settings: set globally and per context, read back. Prints key=value lines.
#include <cuda.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  bool on = true, got = false;
  size_t size = sizeof(bool);
  printf("set_global=%d\n", (int)cuCoredumpSetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &on, &size));
  size = sizeof(bool);
  // each call before its printf: the order a call's arguments are evaluated in is unspecified
  int rc = (int)cuCoredumpGetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &got, &size);
  printf("get_global=%d %d %zu\n", rc, (int)got, size);
  // a context's settings start as the global ones
  got = false;
  size = sizeof(bool);
  rc = (int)cuCoredumpGetAttribute(CU_COREDUMP_ENABLE_ON_EXCEPTION, &got, &size);
  printf("get_context=%d %d\n", rc, (int)got);
  char file[] = "/tmp/tally-core";
  size = sizeof(file);
  printf("set_file=%d\n", (int)cuCoredumpSetAttribute(CU_COREDUMP_FILE, file, &size));
  char back[64] = {0};
  size = sizeof(back);
  rc = (int)cuCoredumpGetAttribute(CU_COREDUMP_FILE, back, &size);
  printf("get_file=%d %s %zu\n", rc, back, size);
  char small[4];
  size = sizeof(small);
  printf("get_file_small=%d\n", (int)cuCoredumpGetAttribute(CU_COREDUMP_FILE, small, &size));
  int flags = CU_COREDUMP_SKIP_GLOBAL_MEMORY, flags_back = 0;
  size = sizeof(int);
  printf("set_flags=%d\n", (int)cuCoredumpSetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags, &size));
  size = sizeof(int);
  cuCoredumpGetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags_back, &size);
  printf("flags=%d\n", flags_back);
  flags = 1 << 20;
  size = sizeof(int);
  printf("set_bad_flags=%d\n", (int)cuCoredumpSetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags, &size));
  size = sizeof(bool);
  printf("bad_attr=%d\n", (int)cuCoredumpGetAttributeGlobal(CU_COREDUMP_MAX, &got, &size));
  printf("null_value=%d\n", (int)cuCoredumpGetAttributeGlobal(CU_COREDUMP_LIGHTWEIGHT, NULL, &size));
  return 0;
}
