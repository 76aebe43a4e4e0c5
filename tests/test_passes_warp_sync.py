"""The warp-operation hazard check (ptx_passes/passes/warp_sync.py): a member-mask
warp operation is flagged exactly when a thread of its warp may have returned
before it runs (a return path skips it, or it repeats in a loop), unless its
mask comes from activemask; .aligned warp instructions are not flagged."""
from __future__ import annotations

import pytest

from ptx_passes import parse_module
from ptx_passes.passes.warp_sync import unsafe_mask_syncs


def _kernel(body: str):
    text = f"""
.version 9.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    .reg .f32 %f<4>;
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 7;
{body}
}}
"""
    return parse_module(text).entries()[0]


def _flagged(body: str) -> list[str]:
    return [" ".join(str(i).split()) for i in unsafe_mask_syncs(_kernel(body))]


SHFL = "shfl.sync.down.b32 %r2|%p2, %r1, 1, 31, -1;"


@pytest.mark.parametrize("name,body,flagged", [
    ("before every return", f"{SHFL}\n@%p1 ret;\nret;", []),
    ("after an early return", f"@%p1 ret;\n{SHFL}\nret;", [SHFL]),
    ("skipped by a branch to the end", f"@%p1 bra $end;\n{SHFL}\n$end:\nret;", [SHFL]),
    ("skipped by a branch to a label closing the body", f"@%p1 bra $end;\n{SHFL}\nret;\n$end:", [SHFL]),
    ("on both sides of a branch", f"@%p1 bra $b;\n{SHFL}\nbra $end;\n$b:\n{SHFL}\n$end:\nret;",
     [SHFL, SHFL]),
    ("inside a loop", f"$top:\n{SHFL}\n@%p1 bra $top;\nret;", [SHFL]),
    ("mask from activemask", "@%p1 ret;\nactivemask.b32 %r3;\nshfl.sync.idx.b32 %r2|%p2, %r1, 0, 31, %r3;\nret;", []),
    ("mask register also set elsewhere",
     "@%p1 ret;\nactivemask.b32 %r3;\nmov.u32 %r3, -1;\nshfl.sync.idx.b32 %r2|%p2, %r1, 0, 31, %r3;\nret;",
     ["shfl.sync.idx.b32 %r2|%p2, %r1, 0, 31, %r3;"]),
    ("vote after exit", "@%p1 exit;\nvote.sync.ballot.b32 %r4, %p1, -1;\nret;", ["vote.sync.ballot.b32 %r4, %p1, -1;"]),
    ("bar.warp.sync after return", "@%p1 ret;\nbar.warp.sync -1;\nret;", ["bar.warp.sync -1;"]),
    ("return inside an asm scope", f"{{\n.reg .pred %q;\nsetp.eq.u32 %q, %r1, 3;\n@%q ret;\n}}\n{SHFL}\nret;", [SHFL]),
    ("scope-local label", f"{{\n@%p1 bra $skip;\nmov.u32 %r5, 1;\n$skip:\n}}\n{SHFL}\nret;", []),
    ("no warp operation", "@%p1 ret;\nret;", []),
])
def test_flagged_warp_operations(name, body, flagged):
    assert _flagged(body) == flagged


def test_aligned_warp_instructions_are_not_flagged():
    body = ("@%p1 ret;\n"
            "$top:\n"
            "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%f0, %f1, %f2, %f3}, {%r2, %r3}, {%r4}, {%f0, %f1, %f2, %f3};\n"
            "@%p1 bra $top;\nret;")
    assert _flagged(body) == []


def test_jump_table_targets_are_followed():
    body = ("ts: .branchtargets $a, $b;\n"
            "brx.idx %r1, ts;\n"
            "$a:\nret;\n"
            f"$b:\n{SHFL}\nret;")
    assert _flagged(body) == [SHFL]
