"""The safety check refuses exactly the kernels it must, per pass, with a reason
that names the problem; everything else in the corpus is transformed."""
from __future__ import annotations

import pytest

from passes_support import ALL_PASSES, pass_kernel_ptx

from ptx_passes import parse_module
from ptx_passes.ir import Block, Instruction, VarDecl, imm, instr, reg
from ptx_passes.passes import PassRefused
from ptx_passes.passes.safety import check_kernel
from ptx_passes.passes.unified_sync import unify_synchronization
from ptx_passes.pipeline import transform_module

EVERY = set(ALL_PASSES)
UNIFYING = {"unified-sync", "ptb"}
NOT_SLICING = EVERY - {"slicing"}   # cluster features: slices keep clusters whole, PTB cannot
BLOCK_INDEX = {"slicing", "ptb", "ptb-raw"}

# (pass-test source, kernel) -> (passes that must refuse it, words every reason line has)
EXPECTED_REFUSALS = {
    ("grid_sync", "grid_sum"): (EVERY, "grid-wide synchronization"),
    ("cluster", "cluster_exchange"): (EVERY, "clusters"),
    ("cluster", "cluster_id"): (NOT_SLICING, "%clusterid.x"),
    ("dynamic_parallelism", "parent"): (EVERY, "dynamic parallelism"),
    ("dynamic_parallelism", "child"): (set(), ""),
    ("external_call", "call_external"): (EVERY, "external function defined_elsewhere"),
    ("refused_kernels", "ctaid_in_function"): (BLOCK_INDEX, "block_of_caller reads %ctaid.x"),
    ("refused_kernels", "barrier_in_function"): (UNIFYING, "inside device function stage_and_sync"),
    ("refused_kernels", "named_barrier"): (UNIFYING, "1, 64"),
    ("refused_kernels", "exit_in_function"): (UNIFYING | {"ptb-raw"}, "leave_if executes `exit`"),
    ("refused_kernels", "reads_gridid"): (EVERY, "%gridid"),
    ("refused_kernels", "dependent_launch"): (EVERY, "griddepcontrol.wait"),
    ("refused_kernels", "indirect_call"): (EVERY, "indirect call"),
    ("refused_kernels", "reads_total_smem"): ({"ptb", "ptb-raw"}, "%total_smem_size"),
    ("refused_kernels", "uses_barrier_15"): ({"ptb-raw"}, "barrier 15"),
    ("sync_reductions", "block_votes"): (set(), ""),
    ("sync_reductions", "barrier_in_asm_scope"): (set(), ""),
    ("warp_sync", "warp_then_block_sum"): (UNIFYING | {"ptb-raw"}, "may run after a thread of its warp returned"),
    ("warp_sync", "shuffle_then_block_sum"): (set(), ""),
}


@pytest.fixture(scope="module")
def reports():
    out = {}
    for source in {s for s, _k in EXPECTED_REFUSALS}:
        result = transform_module(parse_module(pass_kernel_ptx(source), source), ALL_PASSES)
        for name, report in result.kernels.items():
            out[(source, name)] = report
    return out


def test_every_kernel_of_the_pass_sources_has_an_expectation(reports):
    assert set(reports) == set(EXPECTED_REFUSALS)


@pytest.mark.parametrize("key", list(EXPECTED_REFUSALS), ids=lambda k: f"{k[0]}.{k[1]}")
def test_refusals(key, reports):
    refused_by, words = EXPECTED_REFUSALS[key]
    report = reports[key]
    assert set(report.refusals) == refused_by
    assert set(report.variants) == EVERY - refused_by
    for pass_name in refused_by:
        reasons = report.refusals[pass_name]
        assert any(words in line for line in reasons), reasons


def test_dynamic_parallelism_names_both_runtime_calls(reports):
    reasons = reports[("dynamic_parallelism", "parent")].refusals["slicing"]
    assert reasons == (
        "dynamic parallelism: calls __cudaCDP2GetParameterBufferV2 (launches child grids from the device)",
        "dynamic parallelism: calls __cudaCDP2LaunchDeviceV2 (launches child grids from the device)")


def test_named_barrier_reasons_name_arrive_and_thread_count(reports):
    reasons = reports[("refused_kernels", "named_barrier")].refusals["ptb"]
    assert any("`bar.arrive 1, 64;`" in r and "producer/consumer" in r for r in reasons)
    assert any("`bar.sync 1, 64;`" in r and "thread count" in r for r in reasons)


# ---------------------------------------------------------------------------- module-level facts


_SIMPLE = """
.version {version}
.target {target}
.address_size {address_size}
.visible .entry k(.param .u64 k_param_0)
{{
    .reg .b32 %r<3>;
    mov.u32 %r1, %ctaid.x;
    bar.sync 0;
    ret;
}}
"""


def _kernel_reasons(version="9.0", target="sm_80", address_size=64):
    module = parse_module(_SIMPLE.format(version=version, target=target, address_size=address_size))
    return {p: check_kernel(module, module.entries()[0], p) for p in ALL_PASSES}


def test_a_plain_kernel_is_accepted_by_every_pass():
    assert _kernel_reasons() == {p: [] for p in ALL_PASSES}


def test_targets_below_sm_70_are_refused_where_divergent_barriers_are_needed():
    reasons = _kernel_reasons(target="sm_60")
    assert reasons["slicing"] == []
    for p in ("unified-sync", "ptb", "ptb-raw"):
        assert reasons[p] and "sm_60 is below sm_70" in reasons[p][0]


def test_old_ptx_isa_is_refused_where_barrier_red_is_needed():
    reasons = _kernel_reasons(version="5.0")
    assert reasons["slicing"] == []
    assert any("PTX ISA 5.0 is below 6.0" in r for r in reasons["ptb"])


def test_32_bit_addresses_are_refused_by_ptb_only():
    reasons = _kernel_reasons(address_size=32)
    assert reasons["slicing"] == [] and reasons["unified-sync"] == []
    assert any("address size 32" in r for r in reasons["ptb"])
    assert any("address size 32" in r for r in reasons["ptb-raw"])


def test_unknown_pass_name_is_a_clear_error():
    module = parse_module(_SIMPLE.format(version="9.0", target="sm_80", address_size=64))
    with pytest.raises(ValueError, match="unknown pass 'slice'"):
        check_kernel(module, module.entries()[0], "slice")


def test_barrier_in_a_scope_with_a_variable_is_refused_and_the_pass_refuses_too():
    module = parse_module(_SIMPLE.format(version="9.0", target="sm_80", address_size=64))
    kernel = module.entries()[0]
    at = next(i for i, s in enumerate(kernel.body.statements)
              if isinstance(s, Instruction) and s.opcode == "bar")
    kernel.body.statements[at] = Block([VarDecl("local", "b32", "scratch"),
                                        instr("bar.sync", imm(0))])
    reasons = check_kernel(module, kernel, "ptb")
    assert reasons == ["a barrier is inside a nested { } scope that cannot be flattened: "
                       "it declares VarDecl scratch"]
    with pytest.raises(PassRefused, match="VarDecl scratch"):
        unify_synchronization(kernel.clone(), module)


def test_barrier_with_register_number_is_refused():
    module = parse_module(_SIMPLE.format(version="9.0", target="sm_80", address_size=64))
    kernel = module.entries()[0]
    at = next(i for i, s in enumerate(kernel.body.statements)
              if isinstance(s, Instruction) and s.opcode == "bar")
    kernel.body.statements[at] = instr("bar.sync", reg("%r2"))
    assert any("barrier number is a register" in r for r in check_kernel(module, kernel, "unified-sync"))
    assert any("may use barrier 15" in r for r in check_kernel(module, kernel, "ptb-raw"))
    assert check_kernel(module, kernel, "slicing") == []
