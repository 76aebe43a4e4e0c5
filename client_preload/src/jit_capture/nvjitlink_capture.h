// nvJitLink's cubins keep their PTX. cuda.core's Linker links with nvJitLink whenever
// the job has it (PyTorch's wheels bring it), and numba-cuda links every kernel with
// cuda.core: PTX that NVVM wrote goes in, a cubin comes out, and the job loads the
// cubin. Without this, such kernels reach tally without PTX (no slicing, no PTB,
// nothing the emulator can run) although their PTX passed through the job a moment
// before. The client follows each nvJitLink link (nvjitlink_forwarders.h: its
// options and inputs) and, when the job takes the linked cubin, records the PTX the
// cubin was made from (jit_records.h):
// - LTO-IR inputs (-lto) first become PTX: nvJitLink's own, asked for in a second link
//   of those inputs with the job's options and -ptx (numba-cuda compiles its kernels to
//   LTO-IR when they link other files);
// - one PTX input: that PTX;
// - several inputs (PTX, fatbins, cubins with records of their own, libraries such as
//   libcudadevrt.a), or a register cap (-maxrregcount): the PTX tally's own linker makes
//   of them (the server links them as it links cuLink*'s inputs, modules/linker.h).
// A link tally cannot make PTX of (an input it cannot read, an LTO link that gives no
// PTX, inputs tally's linker refuses) is left unrecorded, with the reason in
// tally's trace; the cubin still runs where a cubin can.
//
// How the job's calls reach this: the client exports nvJitLink's versioned names (what
// programs linked against libnvJitLink call); a job that dlopens libnvJitLink gets
// tally's stand-in in front of it (stand_ins.h: client_preload/nvjitlink/). With capture
// off (tally-run --no-jit-capture) nothing is kept and the stand-in is not handed out.
#pragma once
