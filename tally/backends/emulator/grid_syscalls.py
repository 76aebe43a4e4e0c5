"""The driver's cooperative-groups system calls, as the emulator's PTX.

libcudadevrt's cudaCGGetIntrinsicHandle and cudaCGSynchronize (what numba's
`cuda.cg.this_grid().sync()` calls; tally's linker links them from
libcudadevrt.a) end in two functions the GPU driver provides and no library
defines: `__cuda_syscall_CGS_get_intrinsic_handle(scope)` and
`__cuda_syscall_CGS_sync(handle, flags)`. A module that declares them gets these
definitions instead of the declarations:

- the handle of the grid (scope 1) is the launch's grid workspace, the address
  CUDA C++'s inline grid.sync() reads from %envreg1:%envreg2 (0 in a launch that
  is not cooperative, for which cudaCGSynchronize returns 999 and does not wait);
- the synchronization is CUDA C++'s own grid barrier on that workspace: a block
  barrier, then the block's first thread adds to the workspace's counter so that
  its top bit flips once every block has arrived (block 0 adds 0x80000001 minus
  the number of blocks, the others 1) and waits for the flip, then a block
  barrier again. It returns 0 (cudaSuccess).
"""
from __future__ import annotations

import re

_DEFINITIONS = {
    "__cuda_syscall_CGS_get_intrinsic_handle": """
.func (.param .b64 tally_cgs_handle) __cuda_syscall_CGS_get_intrinsic_handle(
	.param .b32 tally_cgs_scope
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<4>;

	ld.param.u32 	%r1, [tally_cgs_scope];
	mov.u32 	%r2, %envreg1;
	mov.u32 	%r3, %envreg2;
	cvt.u64.u32 	%rd1, %r2;
	cvt.u64.u32 	%rd2, %r3;
	shl.b64 	%rd1, %rd1, 32;
	or.b64 	%rd3, %rd1, %rd2;
	setp.ne.s32 	%p1, %r1, 1;
	@%p1 mov.b64 	%rd3, 0;
	st.param.b64 	[tally_cgs_handle], %rd3;
	ret;
}
""",
    "__cuda_syscall_CGS_sync": """
.func (.param .b32 tally_cgs_status) __cuda_syscall_CGS_sync(
	.param .b64 tally_cgs_workspace,
	.param .b32 tally_cgs_flags
)
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<20>;
	.reg .b64 	%rd<3>;

	ld.param.u64 	%rd1, [tally_cgs_workspace];
	barrier.sync 	0;
	mov.u32 	%r1, %tid.x;
	mov.u32 	%r2, %tid.y;
	mov.u32 	%r3, %tid.z;
	or.b32 	%r4, %r1, %r2;
	or.b32 	%r4, %r4, %r3;
	setp.ne.u32 	%p1, %r4, 0;
	@%p1 bra 	$TALLY_CGS_DONE;
	mov.u32 	%r5, %ctaid.x;
	mov.u32 	%r6, %ctaid.y;
	mov.u32 	%r7, %ctaid.z;
	or.b32 	%r8, %r5, %r6;
	or.b32 	%r8, %r8, %r7;
	setp.eq.u32 	%p2, %r8, 0;
	mov.u32 	%r9, %nctaid.x;
	mov.u32 	%r10, %nctaid.y;
	mov.u32 	%r11, %nctaid.z;
	mul.lo.u32 	%r12, %r9, %r10;
	mul.lo.u32 	%r12, %r12, %r11;
	mov.u32 	%r13, -2147483647;
	sub.u32 	%r14, %r13, %r12;
	selp.b32 	%r15, %r14, 1, %p2;
	add.s64 	%rd2, %rd1, 4;
	atom.add.release.gpu.u32 	%r16, [%rd2], %r15;
$TALLY_CGS_WAIT:
	ld.acquire.gpu.u32 	%r17, [%rd2];
	xor.b32 	%r18, %r17, %r16;
	setp.gt.s32 	%p3, %r18, -1;
	@%p3 bra 	$TALLY_CGS_WAIT;
$TALLY_CGS_DONE:
	barrier.sync 	0;
	mov.u32 	%r19, 0;
	st.param.b32 	[tally_cgs_status], %r19;
	ret;
}
""",
}

_DECLARATION = r"\.extern\s+\.func\s*\([^)]*\)\s*{name}\s*\([^)]*\)\s*;"


def provide_grid_syscalls(ptx: str) -> str:
    """`ptx` with each declaration of a cooperative-groups system call replaced by
    its definition (unchanged when it declares none)."""
    if "__cuda_syscall_CGS_" not in ptx:
        return ptx
    for name, definition in _DEFINITIONS.items():
        ptx = re.sub(_DECLARATION.format(name=re.escape(name)), lambda _m, d=definition: d, ptx)
    return ptx
