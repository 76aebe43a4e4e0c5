"""Bad input on the emulator: each fault fails its own launch with a clear
DeviceError (raised once, at the next synchronization of its stream), and the
device keeps working: the next launch on the same device and stream succeeds."""
from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest
from ptx_corpus import CORPUS_DIR, compile_ptx

from tally.backends.base import ModuleSource
from tally.protocol.errors import (
    CUDA_ERROR_ILLEGAL_ADDRESS,
    CUDA_ERROR_ILLEGAL_INSTRUCTION,
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_PTX,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_LAUNCH_FAILED,
    CUDA_ERROR_LAUNCH_TIMEOUT,
    CUDA_ERROR_MISALIGNED_ADDRESS,
    CUDA_ERROR_NO_BINARY_FOR_GPU,
    CUDA_ERROR_NOT_FOUND,
    DeviceError,
)
from tally.backends.emulator import EmulatorBackend

# Hand-written kernels, each with one fault (ptxas accepts them: see the first test).
FAULTS_PTX = """.version 8.0
.target sm_80
.address_size 64

.visible .entry spin_forever(.param .u64 out)
{
	.reg .b32 	%r<3>;
	mov.u32 	%r1, 0;
$L_loop:
	add.s32 	%r1, %r1, 1;
	bra.uni 	$L_loop;
}

.visible .entry divergent_barrier(.param .u64 out)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<3>;
	mov.u32 	%r1, %tid.x;
	setp.lt.u32 	%p1, %r1, 32;
	@%p1 bra 	$L_low;
	bar.sync 	0;
	bra.uni 	$L_done;
$L_low:
	bar.sync 	0;
$L_done:
	ret;
}

.visible .entry mismatched_barriers(.param .u64 out)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<3>;
	mov.u32 	%r1, %tid.x;
	setp.lt.u32 	%p1, %r1, 32;
	@%p1 bra 	$L_low;
	bar.sync 	1;
	bra.uni 	$L_done;
$L_low:
	bar.sync 	0;
$L_done:
	ret;
}

.visible .entry uses_video_instruction(.param .u64 out)
{
	.reg .b32 	%r<6>;
	mov.u32 	%r2, 1;
	mov.u32 	%r3, 2;
	mov.u32 	%r4, 3;
	vadd.u32.u32.u32.add 	%r1, %r2, %r3, %r4;
	ret;
}

.visible .entry store_index(.param .u64 out, .param .u32 index)
{
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<5>;
	ld.param.u64 	%rd1, [out];
	ld.param.u32 	%r1, [index];
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.u32 	[%rd4], %r1;
	ret;
}

.visible .entry store_misaligned(.param .u64 out)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<3>;
	ld.param.u64 	%rd1, [out];
	add.s64 	%rd2, %rd1, 2;
	mov.u32 	%r1, 7;
	st.global.u32 	[%rd2], %r1;
	ret;
}

.visible .entry traps(.param .u64 out)
{
	trap;
}

.func (.param .b32 r) recurse(.param .b32 n)
{
	.reg .b32 	%r<4>;
	ld.param.u32 	%r1, [n];
	add.s32 	%r2, %r1, 1;
	{
	.param .b32 a;
	st.param.b32 	[a], %r2;
	.param .b32 b;
	call.uni (b), recurse, (a);
	ld.param.b32 	%r3, [b];
	}
	st.param.b32 	[r], %r3;
	ret;
}

.visible .entry recurse_forever(.param .u64 out)
{
	.reg .b32 	%r<3>;
	mov.u32 	%r1, 0;
	{
	.param .b32 a;
	st.param.b32 	[a], %r1;
	.param .b32 b;
	call.uni (b), recurse, (a);
	ld.param.b32 	%r2, [b];
	}
	ret;
}
"""


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(FAULTS_PTX.splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def backend():
    b = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=0.5)
    yield b
    b.close()


@pytest.fixture(scope="module")
def faults(backend):
    return backend.module_load(ModuleSource(original=FAULTS_PTX.encode(), ptx=FAULTS_PTX))


@pytest.fixture(scope="module")
def vector_add(backend):
    ptx = compile_ptx(CORPUS_DIR / "vector_add.cu", arch="sm_90")
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    return backend.module_function(module, "vector_add")


@pytest.fixture
def stream(backend):
    s = backend.stream_create()
    yield s
    backend.stream_destroy(s)


def _vector_add_works(backend, fn, stream, n=300):
    """The device still computes: a vector add on the same stream gives a + b."""
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 0.5, np.float32)
    ptrs = [backend.mem_alloc(4 * n) for _ in range(3)]
    backend.memcpy_htod_async(ptrs[0], memoryview(a), stream)
    backend.memcpy_htod_async(ptrs[1], memoryview(b), stream)
    backend.launch(fn, (3, 1, 1), (128, 1, 1), 0, stream, struct.pack("<QQQi", *ptrs, n))
    out = np.zeros(n, np.float32)
    backend.memcpy_dtoh_async(memoryview(out), ptrs[2], stream)
    backend.stream_synchronize(stream)
    for p in ptrs:
        backend.mem_free(p)
    np.testing.assert_array_equal(out, a + b)


def _launch_fails(backend, faults, stream, kernel, grid=(1, 1, 1), block=(64, 1, 1), params=None) -> DeviceError:
    out = backend.mem_alloc(256)
    fn = backend.module_function(faults, kernel)
    backend.launch(fn, grid, block, 0, stream, params if params is not None else struct.pack("<Q", out))
    with pytest.raises(DeviceError) as failure:
        backend.stream_synchronize(stream)
    backend.stream_synchronize(stream)  # raised once: the stream is clean again
    backend.mem_free(out)
    return failure.value


def test_fault_kernels_are_valid_ptx(ptxas, tmp_path):
    path = tmp_path / "faults.ptx"
    path.write_text(FAULTS_PTX)
    result = subprocess.run([ptxas, "-arch=sm_80", str(path), "-o", str(tmp_path / "faults.cubin")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_malformed_ptx_fails_module_load_with_position(backend):
    bad = FAULTS_PTX.replace("add.s32 \t%r1, %r1, 1;", "add.s32 \t%r1, %r1 1;")
    assert bad != FAULTS_PTX
    with pytest.raises(DeviceError) as failure:
        backend.module_load(ModuleSource(original=bad.encode(), ptx=bad))
    assert failure.value.code == CUDA_ERROR_INVALID_PTX
    assert f"{_line_of('add.s32')}:" in failure.value.message


def test_cubin_only_module_is_refused(backend):
    with pytest.raises(DeviceError) as failure:
        backend.module_load(ModuleSource(original=b"x", cubins={90: b"\x7fELF"}))
    assert failure.value.code == CUDA_ERROR_NO_BINARY_FOR_GPU
    assert "sm_90" in failure.value.message


def test_unsupported_instruction_fails_only_that_kernel(backend, faults, vector_add, stream):
    error = _launch_fails(backend, faults, stream, "uses_video_instruction", block=(32, 1, 1))
    assert error.code == CUDA_ERROR_ILLEGAL_INSTRUCTION
    assert "vadd" in error.message and f"PTX line {_line_of('vadd')}" in error.message
    # Other kernels of the same module still run, and so does the next launch of that kernel's stream.
    out = backend.mem_alloc(64)
    backend.launch(backend.module_function(faults, "store_index"), (1, 1, 1), (1, 1, 1), 0, stream,
                   struct.pack("<QI", out, 3))
    value = np.zeros(4, np.uint32)
    backend.memcpy_dtoh_async(memoryview(value), out, stream)
    backend.stream_synchronize(stream)
    assert value[3] == 3
    backend.mem_free(out)
    _vector_add_works(backend, vector_add, stream)


WIDENED_SHARED_PTX = """.version 8.0
.target sm_90
.address_size 64
.extern .shared .align 16 .b8 dyn[];
.visible .entry widened(.param .u64 out, .param .u32 offset)
{
	.reg .b32 %r<8>;
	.reg .b64 %rd<2>;
	ld.param.u64 %rd1, [out];
	cvta.to.global.u64 %rd1, %rd1;
	ld.param.u32 %r1, [offset];
	mov.u32 %r2, dyn;
	add.u32 %r2, %r2, %r1;
	mov.u32 %r3, 7;
	st.shared.u32 [dyn+24], %r3;
	ld.shared.v4.u32 {%r4, %r5, %r6, %r7}, [%r2];
	st.global.v4.u32 [%rd1], {%r4, %r5, %r6, %r7};
	ret;
}
"""


def test_a_block_may_touch_the_rest_of_its_shared_memorys_allocation_unit(backend, stream):
    """As on a GPU, which gives a block shared memory in 128-byte units: a 16-byte load at
    offset 16 of a 28-byte dynamic array (LLVM widens loads so; nvJitLink's LTO did it to
    numba-cuda's test_sm) reads the unit's padding as zeros; the next unit faults."""
    module = backend.module_load(ModuleSource(original=WIDENED_SHARED_PTX.encode(), ptx=WIDENED_SHARED_PTX))
    fn = backend.module_function(module, "widened")
    out = backend.mem_alloc(16)
    backend.launch(fn, (1, 1, 1), (1, 1, 1), 28, stream, struct.pack("<QI", out, 16))
    got = bytearray(16)
    backend.memcpy_dtoh_async(memoryview(got), out, stream)
    backend.stream_synchronize(stream)
    assert struct.unpack("<4I", got) == (0, 0, 7, 0)
    backend.launch(fn, (1, 1, 1), (1, 1, 1), 28, stream, struct.pack("<QI", out, 128))
    with pytest.raises(DeviceError) as failure:
        backend.stream_synchronize(stream)
    assert failure.value.code == CUDA_ERROR_ILLEGAL_ADDRESS and "shared space" in failure.value.message
    backend.stream_synchronize(stream)
    backend.mem_free(out)


def test_illegal_address_names_address_thread_and_line(backend, faults, vector_add, stream):
    out = backend.mem_alloc(64)
    error = _launch_fails(backend, faults, stream, "store_index", block=(1, 1, 1),
                          params=struct.pack("<QI", out, 1000))
    assert error.code == CUDA_ERROR_ILLEGAL_ADDRESS
    assert f"0x{out + 4000:x}" in error.message
    assert "thread (0,0,0) of block (0,0,0)" in error.message
    store_line = _line_of("st.global.u32 \t[%rd4]")
    assert f"line {store_line}" in error.message
    backend.mem_free(out)
    _vector_add_works(backend, vector_add, stream)


def test_use_after_free_is_an_illegal_address(backend, faults, stream):
    out = backend.mem_alloc(64)
    backend.mem_free(out)
    error = _launch_fails(backend, faults, stream, "store_index", block=(1, 1, 1), params=struct.pack("<QI", out, 0))
    assert error.code == CUDA_ERROR_ILLEGAL_ADDRESS


def test_misaligned_store(backend, faults, stream):
    error = _launch_fails(backend, faults, stream, "store_misaligned", block=(1, 1, 1))
    assert error.code == CUDA_ERROR_MISALIGNED_ADDRESS
    assert "misaligned address" in error.message


def test_threads_at_different_barrier_instructions_are_reported(backend, faults, vector_add, stream):
    error = _launch_fails(backend, faults, stream, "divergent_barrier")
    assert error.code == CUDA_ERROR_LAUNCH_FAILED
    assert "divergent barrier" in error.message
    assert "threads 0-31" in error.message and "threads 32-63" in error.message
    _vector_add_works(backend, vector_add, stream)


def test_barriers_that_can_never_complete_are_reported(backend, faults, vector_add, stream):
    error = _launch_fails(backend, faults, stream, "mismatched_barriers")
    assert error.code == CUDA_ERROR_LAUNCH_FAILED
    assert "can never continue" in error.message
    assert "bar.sync 1" in error.message and "bar.sync 0" in error.message
    _vector_add_works(backend, vector_add, stream)


def test_infinite_loop_hits_the_launch_time_limit(backend, faults, vector_add, stream):
    error = _launch_fails(backend, faults, stream, "spin_forever", block=(32, 1, 1))
    assert error.code == CUDA_ERROR_LAUNCH_TIMEOUT
    assert "time limit" in error.message
    _vector_add_works(backend, vector_add, stream)


def test_instruction_limit(faults):
    backend = EmulatorBackend(printf_to_stdout=False, max_warp_instructions=100_000)
    try:
        ptx = FAULTS_PTX
        module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
        s = backend.stream_create()
        error = _launch_fails(backend, module, s, "spin_forever", block=(32, 1, 1))
        assert error.code == CUDA_ERROR_LAUNCH_TIMEOUT and "100000 warp instructions" in error.message
    finally:
        backend.close()


def test_trap_fails_the_launch(backend, faults, stream):
    error = _launch_fails(backend, faults, stream, "traps", block=(1, 1, 1))
    assert error.code == CUDA_ERROR_LAUNCH_FAILED and "trap" in error.message


def test_unbounded_recursion_overflows_the_call_stack(backend, faults, stream):
    error = _launch_fails(backend, faults, stream, "recurse_forever", block=(1, 1, 1))
    assert error.code == CUDA_ERROR_LAUNCH_FAILED and "call stack overflow" in error.message


def test_errors_stay_on_their_stream(backend, faults, vector_add):
    failing, healthy = backend.stream_create(), backend.stream_create()
    backend.launch(backend.module_function(faults, "traps"), (1, 1, 1), (1, 1, 1), 0, failing,
                   struct.pack("<Q", 0))
    _vector_add_works(backend, vector_add, healthy)
    with pytest.raises(DeviceError):
        backend.synchronize()
    backend.synchronize()  # raised once
    backend.stream_destroy(failing)
    backend.stream_destroy(healthy)


def test_bad_launch_arguments_raise_at_once(backend, vector_add, stream):
    params = struct.pack("<QQQi", 0, 0, 0, 0)
    for grid, block in [((0, 1, 1), (32, 1, 1)), ((1, 1, 1), (2048, 1, 1)), ((1, 1, 1), (32, 32, 2)),
                        ((1, 70000, 1), (1, 1, 1))]:
        with pytest.raises(DeviceError) as failure:
            backend.launch(vector_add, grid, block, 0, stream, params)
        assert failure.value.code == CUDA_ERROR_INVALID_VALUE
    with pytest.raises(DeviceError) as failure:
        backend.launch(vector_add, (1, 1, 1), (32, 1, 1), 0, stream, params[:20])
    assert failure.value.code == CUDA_ERROR_INVALID_VALUE and "28" in failure.value.message
    with pytest.raises(DeviceError) as failure:
        backend.launch(vector_add, (1, 1, 1), (32, 1, 1), 10**9, stream, params)
    assert failure.value.code == CUDA_ERROR_INVALID_VALUE
    with pytest.raises(DeviceError) as failure:
        backend.launch(object(), (1, 1, 1), (32, 1, 1), 0, stream, params)
    assert failure.value.code == CUDA_ERROR_INVALID_HANDLE
    backend.stream_synchronize(stream)


def test_bad_memory_calls_raise_at_once(backend, stream):
    ptr = backend.mem_alloc(100)
    with pytest.raises(DeviceError) as failure:
        backend.memcpy_htod_async(ptr + 50, memoryview(bytes(64)), stream)
    assert failure.value.code == CUDA_ERROR_INVALID_VALUE and "not inside one live device allocation" in failure.value.message
    with pytest.raises(DeviceError):
        backend.memset_async(ptr, 0, 4, 26, stream)
    with pytest.raises(DeviceError):
        backend.memset_async(ptr, 0, 8, 2, stream)
    with pytest.raises(DeviceError):
        backend.memcpy_dtod_async(ptr, ptr + (1 << 20), 4, stream)
    for bad in (-1, 1 << 64):
        with pytest.raises(DeviceError) as failure:
            backend.memcpy_dtod_async(ptr, bad, 4, stream)
        assert failure.value.code == CUDA_ERROR_INVALID_VALUE
    backend.mem_free(ptr)
    with pytest.raises(DeviceError) as failure:
        backend.mem_free(ptr)
    assert failure.value.code == CUDA_ERROR_INVALID_VALUE
    with pytest.raises(DeviceError) as failure:
        backend.mem_alloc(0)
    assert failure.value.code == CUDA_ERROR_INVALID_VALUE
    with pytest.raises(DeviceError) as failure:
        backend.mem_alloc(1 << 50)
    assert failure.value.code == 2  # CUDA_ERROR_OUT_OF_MEMORY
    backend.stream_synchronize(stream)


def test_unknown_names(backend, faults):
    with pytest.raises(DeviceError) as failure:
        backend.module_function(faults, "no_such_kernel")
    assert failure.value.code == CUDA_ERROR_NOT_FOUND
    with pytest.raises(DeviceError) as failure:
        backend.module_global(faults, "no_such_variable")
    assert failure.value.code == CUDA_ERROR_NOT_FOUND


def test_unsound_program_is_refused_not_run():
    """The interpreter validates what it trusts (slots inside their banks, targets,
    copy lists) before running a program: a lowering bug cannot read out of bounds."""
    from tally._core import emulator as core
    program = core.Program("broken")
    frame_slot_past_the_end = 5
    assert program.add("add.s32", [0, 1, frame_slot_past_the_end], text="add.s32 %r0, %r1, %r5;")
    assert program.add("ret", [], text="ret;")
    program.frame_registers = 2
    memory = core.DeviceMemory(1 << 20)
    result = core.run_launch(program, memory, b"", (1, 1, 1), (32, 1, 1))
    assert result.code == CUDA_ERROR_LAUNCH_FAILED
    assert "unsound" in result.message and "add.s32 %r0, %r1, %r5;" in result.message
    program.frame_registers = 6
    assert core.run_launch(program, memory, b"", (1, 1, 1), (32, 1, 1)).code == 0
    assert not program.add("no.such.key", [], text="")


def test_wrong_operand_count_is_an_unsupported_instruction(backend, stream):
    text = FAULTS_PTX.replace("add.s32 \t%r1, %r1, 1;", "shl.b32 \t%r1, %r1;")
    assert text != FAULTS_PTX
    module = backend.module_load(ModuleSource(original=text.encode(), ptx=text))
    error = _launch_fails(backend, module, stream, "spin_forever", block=(32, 1, 1))
    assert error.code == CUDA_ERROR_ILLEGAL_INSTRUCTION and "shl.b32" in error.message


def test_a_kernel_may_touch_the_rest_of_its_allocations_granule(backend, faults, vector_add, stream):
    """As on a GPU, where allocations are 256-byte granules: a store a few elements past the
    end of a 64-byte allocation (numba's own tests do it) lands in the granule's padding; the
    first byte of the next granule is an illegal address."""
    out = backend.mem_alloc(64)
    backend.launch(backend.module_function(faults, "store_index"), (1, 1, 1), (1, 1, 1), 0, stream,
                   struct.pack("<QI", out, 63))       # bytes 252..255
    backend.stream_synchronize(stream)
    error = _launch_fails(backend, faults, stream, "store_index", block=(1, 1, 1), params=struct.pack("<QI", out, 64))
    assert error.code == CUDA_ERROR_ILLEGAL_ADDRESS and f"0x{out + 256:x}" in error.message
    backend.mem_free(out)
    _vector_add_works(backend, vector_add, stream)
