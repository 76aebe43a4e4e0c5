/* A library that opens another by bare name, relying on its own RUNPATH to find it
   (as cuDNN opens its sub-libraries, and NVRTC's users open NVRTC). */
#include <dlfcn.h>

void* outer_open(const char* name) { return dlopen(name, RTLD_NOW | RTLD_LOCAL); }
