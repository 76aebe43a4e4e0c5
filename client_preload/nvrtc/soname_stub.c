/* Empty: a library whose soname alone is what the stand-ins link against, so each
   records a dependency on NVRTC's soname without NVRTC present at build time. */
