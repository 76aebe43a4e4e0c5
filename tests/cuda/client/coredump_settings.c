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
  // a length without the terminator, as cuda-bindings passes a bytes object
  const char pipe[] = "/tmp/tally-pipe";
  size = strlen(pipe);
  rc = (int)cuCoredumpSetAttributeGlobal(CU_COREDUMP_PIPE, (void*)pipe, &size);
  size = sizeof(back);
  int rc2 = (int)cuCoredumpGetAttributeGlobal(CU_COREDUMP_PIPE, back, &size);
  printf("pipe_without_terminator=%d %d %s\n", rc, rc2, back);
  char long_path[1100];
  memset(long_path, 'a', sizeof(long_path) - 1);
  long_path[sizeof(long_path) - 1] = '\0';
  size = sizeof(long_path);
  printf("set_long_file=%d\n", (int)cuCoredumpSetAttributeGlobal(CU_COREDUMP_FILE, long_path, &size));
  bool host = false;
  size = sizeof(bool);
  rc = (int)cuCoredumpGetAttributeGlobal(CU_COREDUMP_TRIGGER_HOST, &host, &size);
  printf("trigger_host_default=%d %d\n", rc, (int)host);
  size = sizeof(back);
  rc = (int)cuCoredumpGetAttributeGlobal(CU_COREDUMP_FILE, back, &size);
  printf("file_default=%d %s\n", rc, back);
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
