"""Property: the passes never emit PTX that ptxas rejects.

Two sources of inputs, each a few examples (ptxas takes ~50-100 ms a run):
* generated kernels mixing what the passes rewrite: block-index reads, early
  returns and exits (guarded, inside loops, inside asm scopes), every supported
  barrier form (plain, numbered, guarded, .aligned, bar.red popc/and/or, inside
  scopes), warp shuffles, forward branches and loops;
* corpus kernels with one such statement inserted at a random place.
An input ptxas accepts must come out accepted, every pass applied (unified sync
and PTB may refuse a kernel whose warp operations could follow a return; nothing
else may be refused)."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from passes_support import ALL_PASSES, run_ptxas
from ptx_corpus import CORPUS_FILES, compile_ptx

from ptx_passes import PtxParseError, parse_module, print_module
from ptx_passes.ir import RegDecl, imm, instr, reg, special
from ptx_passes.passes.kernel_code import code_start
from ptx_passes.pipeline import transform_module

_SETTINGS = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_HEADER = """.version 9.0
.target sm_80
.address_size 64

.visible .entry generated(
\t.param .u64 generated_param_0,
\t.param .u32 generated_param_1
)
{
\t.reg .pred \t%p<8>;
\t.reg .b32 \t%r<16>;
\t.reg .b64 \t%rd<4>;
\t.shared .align 4 .b8 tile[256];

\tld.param.u64 \t%rd1, [generated_param_0];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tld.param.u32 \t%r1, [generated_param_1];
\tmov.u32 \t%r2, %tid.x;
"""


def _r(draw) -> str:
    return f"%r{draw(st.integers(0, 15))}"


def _p(draw) -> str:
    return f"%p{draw(st.integers(0, 7))}"


@st.composite
def _statement(draw, labels_ahead: list[str], labels_behind: list[str]) -> list[str]:
    kind = draw(st.sampled_from([
        "special", "arith", "setp", "return", "exit", "barrier", "numbered_barrier",
        "guarded_barrier", "aligned_barrier", "red_popc", "red_and", "red_or", "scoped_red",
        "scoped_return", "store", "shared", "shuffle", "warp_sync", "branch", "loop"]))
    r, s, p = _r(draw), _r(draw), _p(draw)
    if kind == "special":
        name = draw(st.sampled_from(["%ctaid", "%nctaid", "%tid", "%ntid"]))
        return [f"mov.u32 \t{r}, {name}.{draw(st.sampled_from('xyz'))};"]
    if kind == "arith":
        return [f"add.s32 \t{r}, {s}, {_r(draw)};"]
    if kind == "setp":
        return [f"setp.lt.u32 \t{p}, {r}, {s};"]
    if kind in ("return", "exit"):
        return [f"@{p} {'ret' if kind == 'return' else 'exit'};"]
    if kind == "barrier":
        return ["bar.sync \t0;"]
    if kind == "numbered_barrier":
        return [f"barrier.sync \t{draw(st.integers(0, 14))};"]
    if kind == "guarded_barrier":
        return [f"@{p} bar.sync \t0;"]
    if kind == "aligned_barrier":
        return ["barrier.sync.aligned \t0;"]
    if kind == "red_popc":
        return [f"bar.red.popc.u32 \t{r}, 0, {p};"]
    if kind == "red_and":
        return [f"bar.red.and.pred \t{p}, 0, !{_p(draw)};"]
    if kind == "red_or":
        return [f"barrier.red.or.pred \t{p}, 0, {_p(draw)};"]
    if kind == "scoped_red":
        return ["{", ".reg .pred \t%p1;", f"setp.ne.u32 \t%p1, {r}, 0;", "bar.red.or.pred \t%p1, 0, %p1;",
                f"selp.u32 \t{s}, 1, 0, %p1;", "}"]
    if kind == "scoped_return":
        return ["{", ".reg .pred \t%q;", f"setp.eq.u32 \t%q, {r}, 7;", "@%q ret;", "}"]
    if kind == "store":
        return [f"st.global.u32 \t[%rd1+{4 * draw(st.integers(0, 63))}], {r};"]
    if kind == "shared":
        return [f"st.shared.u32 \t[tile+{4 * draw(st.integers(0, 63))}], {r};"]
    if kind == "shuffle":
        return [f"shfl.sync.bfly.b32 \t{r}|{p}, {s}, 1, 31, -1;"]
    if kind == "warp_sync":
        return ["bar.warp.sync \t-1;"]
    if kind == "branch" and labels_ahead:
        return [f"@{p} bra \t{draw(st.sampled_from(labels_ahead))};"]
    if kind == "loop" and labels_behind:
        return [f"@{p} bra \t{draw(st.sampled_from(labels_behind))};"]
    return [f"mov.u32 \t{r}, {draw(st.integers(0, 1000))};"]


@st.composite
def generated_kernels(draw) -> str:
    count = draw(st.integers(1, 25))
    label_at = sorted(draw(st.sets(st.integers(0, count), max_size=4)))
    labels = {i: f"$L_{i}" for i in label_at}
    lines = [f"mov.u32 \t%r{i}, {i};" for i in range(3, 16)]
    lines += [f"setp.ne.u32 \t%p{i}, %r{i + 3}, %r2;" for i in range(8)]
    for i in range(count + 1):
        if i in labels:
            lines.append(f"{labels[i]}:")
        if i < count:
            ahead = [l for j, l in labels.items() if j > i]
            behind = [l for j, l in labels.items() if j <= i]
            lines += draw(_statement(ahead, behind))
    lines.append("ret;")
    return _HEADER + "".join(line if line.endswith(":") else "\t" + line for line in
                             (l + "\n" for l in lines)) + "}\n"


_WARP_HAZARD = "may run after a thread of its warp returned"


def _assemble(text: str, directory: str, name: str):
    path = Path(directory) / f"{name}.ptx"
    path.write_text(text)
    return run_ptxas(path, "sm_80")


def _check(original_text: str) -> None:
    """Input and output go to a fresh directory that is removed only when ptxas accepts
    both, so a failure's message names files that still exist."""
    tmp = tempfile.mkdtemp(prefix="tally-pass-property-")
    before = _assemble(original_text, tmp, "input")
    assert before.ok, f"the generated input itself is invalid: {before.failure()}\n{original_text}"
    result = transform_module(parse_module(original_text), ALL_PASSES)
    for report in result.kernels.values():
        # The only refusal these inputs may earn: a warp operation after a possible return.
        for pass_name, reasons in report.refusals.items():
            assert pass_name != "slicing" and all(_WARP_HAZARD in r for r in reasons), reasons
    after = _assemble(print_module(result.module), tmp, "transformed")
    assert after.ok, f"input: {tmp}/input.ptx\n{after.failure()}"
    shutil.rmtree(tmp)


@_SETTINGS
@given(generated_kernels())
def test_generated_kernels_transform_to_valid_ptx(text):
    _check(text)


_INSERTIONS = {
    "return": lambda: [instr("ret")],
    "exit": lambda: [instr("exit")],
    "barrier": lambda: [instr("bar.sync", imm(0))],
    "red_popc": lambda: [instr("setp.ne.u32", reg("%tally_test_p"), special("%tid", "x"), imm(3)),
                         instr("bar.red.popc.u32", reg("%tally_test_r"), imm(0), reg("%tally_test_p"))],
    "ctaid_y": lambda: [instr("mov.u32", reg("%tally_test_r"), special("%ctaid", "y"))],
    "nctaid_z": lambda: [instr("mov.u32", reg("%tally_test_r"), special("%nctaid", "z"))],
}


@_SETTINGS
@given(source=st.sampled_from(CORPUS_FILES), what=st.sampled_from(sorted(_INSERTIONS)),
       data=st.data())
def test_corpus_kernels_with_an_inserted_statement_transform_to_valid_ptx(source, what, data):
    module = parse_module(compile_ptx(source, "sm_80"))
    kernel = data.draw(st.sampled_from(module.entries()))
    body = kernel.body.statements
    body[0:0] = [RegDecl("pred", "%tally_test_p"), RegDecl("b32", "%tally_test_r")]
    start = code_start(kernel.body)
    at = data.draw(st.integers(start, len(body)))
    body[at:at] = _INSERTIONS[what]()
    text = print_module(module)
    with tempfile.TemporaryDirectory() as tmp:
        assume(_assemble(text, tmp, "mutated").ok)   # only inputs ptxas accepts count
    _check(text)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(source=st.sampled_from(CORPUS_FILES), data=st.data())
def test_passes_never_crash_on_mutated_parseable_ptx(source, data):
    """Lines deleted, duplicated or swapped: whatever still parses is transformed or
    refused with reasons, never an exception (no ptxas here, so many examples)."""
    lines = compile_ptx(source, "sm_80").splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        j = data.draw(st.integers(0, len(lines) - 1))
        kind = data.draw(st.sampled_from(["delete", "duplicate", "swap"]))
        if kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
    try:
        module = parse_module("\n".join(lines))
    except PtxParseError:
        assume(False)
    result = transform_module(module, ALL_PASSES)
    for report in result.kernels.values():
        for pass_name in ALL_PASSES:
            assert (pass_name in report.variants) != bool(report.refusals.get(pass_name))
        assert not any("internal error" in r for reasons in report.refusals.values() for r in reasons)
