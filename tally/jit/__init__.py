"""JIT capture: the PTX behind cubins a job's JIT compilers make (Triton, ptxas callers).

A JIT compiler in the job writes PTX, assembles it and loads only the cubin; the
PTX is gone before tally sees the module. tally-run (`job_env.py`) names tally's
assembler wrapper (`ptxas_wrapper.py`) where the job's compilers look for ptxas;
the wrapper runs the real assembler and stores the PTX in the user's record cache
(`records.py`), keyed by the cubin it produced. At cuModuleLoadData the job's
client library (client_preload/src/modules/jit_records.cpp) finds the record of a
bare cubin by the same key and sends it with the image; the server checks it
against the cubin (`ptx_match.py`) before treating the module as one with PTX.

Why the lookup is in the client: the records are the job's user's files (~/.cache),
which a server run by another user cannot and should not read; the client runs as
that user. Why the check is in the server: it is the one that acts on the PTX, and
a record is a file anyone of that user may have changed.
"""
