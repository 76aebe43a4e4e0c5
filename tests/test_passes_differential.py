"""Differential property on the CPU emulator: random kernels mixing early returns,
barriers (plain and __syncthreads_count/_and/_or), shared-memory exchanges,
divergent bounded loops, forward branches and block-index reads compute the
same outputs in their original, unified-sync, sliced and PTB forms (PTB with 1
and 2 workers, and preempted while running). Kernels whose original the emulator
rejects (a divergent barrier) do not count.

Every output is a per-thread slot, written only by its thread, and shared memory
is read only between two barriers, so the outputs do not depend on scheduling."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from emulator_corpus import Buf, Case, Launch, run_case
from emulator_variants import PTBRunner, launch_sliced, launch_variant

from ptx_passes import parse_module, print_module
from ptx_passes.pipeline import transform_module
from tally.backends.base import ModuleSource
from tally.protocol.errors import DeviceError
from tally.backends.emulator import EmulatorBackend

SLOTS = 6                      # u32 outputs per thread
REGS = 15                      # %r0..%r14 hold values; %r15 accumulates results; %r16.. fixed
ACCUMULATE = "mad.lo.s32 \t%r15, %r15, 31, {};"    # order-sensitive digest of what a thread saw
_HEADER = f""".version 9.0
.target sm_80
.address_size 64

.visible .entry gen(
\t.param .u64 gen_param_0
)
{{
\t.reg .pred \t%p<8>;
\t.reg .pred \t%q<4>;
\t.reg .b32 \t%r<24>;
\t.reg .b32 \t%c<4>;
\t.reg .b64 \t%rd<8>;
\t.shared .align 4 .b8 tile[4096];

\tld.param.u64 \t%rd1, [gen_param_0];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r16, %tid.x;
\tmov.u32 \t%r17, %ntid.x;
\tmov.u32 \t%r18, %ctaid.x;
\tmov.u32 \t%r19, %ctaid.y;
\tmov.u32 \t%r20, %nctaid.x;
\tmad.lo.s32 \t%r21, %r19, %r20, %r18;
\tmad.lo.s32 \t%r21, %r21, %r17, %r16;
\tmul.wide.u32 \t%rd2, %r21, {4 * SLOTS};
\tadd.s64 \t%rd2, %rd1, %rd2;
\tshl.b32 \t%r22, %r16, 2;
\tmov.u32 \t%r23, tile;
\tadd.s32 \t%r22, %r23, %r22;
"""


def _r(draw) -> str:
    return f"%r{draw(st.integers(0, REGS - 1))}"


def _p(draw) -> str:
    return f"%p{draw(st.integers(0, 7))}"


@st.composite
def _simple(draw) -> list[str]:
    """A statement that does not change control flow."""
    kind = draw(st.sampled_from(["arith", "mix", "setp", "special", "store", "popc", "and", "or",
                                 "exchange", "barrier"]))
    r, a, b = _r(draw), _r(draw), _r(draw)
    if kind == "arith":
        op = draw(st.sampled_from(["add.s32", "xor.b32", "mul.lo.s32", "sub.s32", "and.b32"]))
        return [f"{op} \t{r}, {a}, {b};"]
    if kind == "mix":
        return [f"mad.lo.s32 \t{r}, {a}, {draw(st.integers(3, 97))}, {b};"]
    if kind == "setp":
        cmp = draw(st.sampled_from(["lt.u32", "gt.s32", "eq.u32", "ne.u32"]))
        return [f"setp.{cmp} \t{_p(draw)}, {a}, {b};"]
    if kind == "special":
        name = draw(st.sampled_from(["%ctaid.x", "%ctaid.y", "%nctaid.x", "%nctaid.y", "%tid.x"]))
        return [f"mov.u32 \t%r16, {name};", f"add.s32 \t{r}, {r}, %r16;", ACCUMULATE.format(r)]
    if kind == "store":
        return [f"st.global.u32 \t[%rd2+{4 * draw(st.integers(0, SLOTS - 3))}], {a};"]
    if kind == "popc":
        return [f"bar.red.popc.u32 \t{r}, 0, {_p(draw)};", ACCUMULATE.format(r)]
    if kind in ("and", "or"):
        negate = "!" if draw(st.booleans()) else ""
        return [f"bar.red.{kind}.pred \t%q0, 0, {negate}{_p(draw)};", f"selp.u32 \t{r}, 1, 0, %q0;",
                ACCUMULATE.format(r)]
    if kind == "exchange":
        # write own slot; barrier; read a neighbour's slot; barrier
        return [f"st.shared.u32 \t[%r22], {a};", "bar.sync \t0;",
                "mov.u32 \t%r16, %tid.x;",
                f"add.s32 \t%r16, %r16, {draw(st.integers(1, 5))};",
                "rem.u32 \t%r16, %r16, %r17;", "shl.b32 \t%r16, %r16, 2;", "add.s32 \t%r16, %r23, %r16;",
                f"ld.shared.u32 \t{r}, [%r16];", "bar.sync \t0;", ACCUMULATE.format(r)]
    return ["bar.sync \t0;"]


@st.composite
def _statement(draw, depth: int, labels: list[int]) -> list[str]:
    kind = draw(st.sampled_from(["simple"] * 6 + ["return", "branch", "loop"]))
    if kind == "return":
        p = _p(draw)
        return [f"@{p} st.global.u32 \t[%rd2+{4 * (SLOTS - 2)}], %r15;", f"@{p} ret;"]
    if kind in ("branch", "loop") and depth < 2:
        labels[0] += 1
        label = f"$L_{depth}_{labels[0]}"
        inner = [line for _ in range(draw(st.integers(1, 4)))
                 for line in draw(_statement(depth + 1, labels))]
        if kind == "branch":
            return [f"@{_p(draw)} bra \t{label};"] + inner + [f"{label}:"]
        counter = f"%c{depth}"
        # 1 to 3 trips, possibly different per thread (divergent loops)
        return [f"rem.u32 \t{counter}, {_r(draw)}, 3;", f"add.s32 \t{counter}, {counter}, 1;",
                f"{label}:"] + inner + [f"sub.s32 \t{counter}, {counter}, 1;",
                                        f"setp.ne.u32 \t%q1, {counter}, 0;", f"@%q1 bra \t{label};"]
    return draw(_simple())


@st.composite
def differential_kernels(draw) -> str:
    # values and predicates that differ between the threads of a block
    lines = []
    for i in range(REGS):
        lines += [f"mad.lo.s32 \t%r{i}, %r21, {draw(st.integers(1, 50))}, {draw(st.integers(0, 99))};",
                  f"rem.u32 \t%r{i}, %r{i}, {draw(st.integers(2, 13))};"]
    lines += [f"setp.lt.u32 \t%p{i}, %r{i}, {draw(st.integers(0, 8))};" for i in range(8)]
    lines.append("mov.u32 \t%r15, 7;")
    # every thread writes its shared slot once before anything can return
    lines += ["st.shared.u32 \t[%r22], %r0;", "bar.sync \t0;"]
    labels = [0]
    for _ in range(draw(st.integers(2, 10))):
        lines += draw(_statement(0, labels))
    lines += [f"st.global.u32 \t[%rd2+{4 * (SLOTS - 1)}], %r15;", "ret;"]
    return _HEADER + "".join(("" if l.endswith(":") else "\t") + l + "\n" for l in lines) + "}\n"


GRID, BLOCK = (3, 2, 1), (40, 1, 1)    # 6 blocks of 40 threads: a full and a partial warp
FORMS = {
    "unified-sync": lambda r: launch_variant("unified-sync"),
    "sliced-4": lambda r: launch_sliced(r, 4),
    "ptb-1-worker": lambda r: PTBRunner(r, workers=1),
    "ptb-2-workers": lambda r: PTBRunner(r, workers=2),
    "ptb-preempted": lambda r: PTBRunner(r, workers=1, preempt="during", at_task=2),
}

_backend = None


def _emulator() -> EmulatorBackend:
    global _backend
    if _backend is None:
        _backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=30)
    return _backend


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(differential_kernels())
def test_every_form_computes_what_the_original_computes(text):
    result = transform_module(parse_module(text), ("slicing", "unified-sync", "ptb"))
    assert result.kernels["gen"].refusals == {}
    module_text = print_module(result.module)
    backend = _emulator()
    module = backend.module_load(ModuleSource(original=module_text.encode(), ptx=module_text))
    threads = GRID[0] * GRID[1] * BLOCK[0]
    case = Case("gen", "generated", [Launch("gen", GRID, BLOCK, (Buf("out"),))],
                {"out": np.full(threads * SLOTS, 0xDEADBEEF, np.uint32)}, {})
    try:
        try:
            want = run_case(backend, module, case)["out"]
        except DeviceError as exc:
            assume("divergent barrier" not in exc.message)
            raise
        for form, make in FORMS.items():
            got = run_case(backend, module, case, launcher=make(result.kernels))["out"]
            np.testing.assert_array_equal(got, want, err_msg=f"{form} differs from the original:\n{text}")
    finally:
        backend.module_unload(module)
