/* Empty: a library whose soname alone is what a stand-in links against
   (src/jit_capture/stand_ins.h), so each records a dependency on the real library's
   soname (libnvrtc.so.13, libnvJitLink.so.13, ...) without it present at build time. */
