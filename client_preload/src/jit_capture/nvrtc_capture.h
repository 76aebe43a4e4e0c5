// NVRTC's cubins keep their PTX. A job that compiles CUDA C++ with NVRTC for a
// real architecture (-arch=sm_XX) and loads the cubin nvrtcGetCUBIN gave it would
// reach tally without PTX (no slicing, no PTB, nothing the emulator can run). NVRTC
// keeps the PTX it assembled that cubin from (nvrtcGetPTX answers after such a
// compile), so when the job takes a cubin, the client writes the pair as a
// JIT-capture record (jit_records.h), which goes with the cubin when it is loaded.
//
// How the job's nvrtcGetCUBIN reaches this:
// - a program or library linked against libnvrtc binds to the nvrtcGetCUBIN this
//   library exports (it is preloaded, so it comes first);
// - a job that dlopens libnvrtc and looks its functions up in that handle (cuda-
//   bindings, cuda.core) gets, from tally's dlopen, a small library of tally's
//   (client_preload/nvrtc/: libtally-nvrtc.so.<NVRTC's soname version>, stand_ins.h)
//   that defines nvrtcGetCUBIN and depends on the real libnvrtc, so every other name
//   resolves to NVRTC's own.
// With capture off (tally-run --no-jit-capture: no TALLY_JIT_CAPTURE_DIR) the
// call is only passed on, and dlopen hands out the real libnvrtc.
#pragma once

// The client's part is in nvrtc_capture.cpp: the nvrtcGetCUBIN it exports, and
// tally_client_record_nvrtc_cubin, which the stand-in calls.
