"""The IR's helpers the passes and the emulator rely on: defs/uses, modifier queries,
traversal, fresh names, builders, clone and operand mapping."""
from __future__ import annotations

import math
import subprocess

import pytest

from ptx_corpus import cuda_tool
from ptx_passes import ir, parse_module, print_module
from ptx_passes.ir import (Address, Immediate, PredPair, Sink, Vector, addr, imm, instr, reg,
                           special, sym)

HEADER = ".version 9.0\n.target sm_80\n.address_size 64\n"


def _one(line: str, decls: str = "") -> ir.Instruction:
    m = parse_module(HEADER + ".entry k()\n{\n" + decls + "\n" + line + "\n}\n")
    return next(m.function("k").body.instructions())


def _names(regs) -> list[str]:
    return [r.name for r in regs]


DEFS_USES = [
    ("add.s32 %r1, %r2, 4;", ["%r1"], ["%r2"]),
    ("@%p1 add.s32 %r1, %r2, %r3;", ["%r1"], ["%p1", "%r2", "%r3"]),
    ("st.global.u32 [%rd1+4], %r2;", [], ["%rd1", "%r2"]),
    ("ld.global.v4.f32 {%f1, _, %f3, %f4}, [%rd2];", ["%f1", "%f3", "%f4"], ["%rd2"]),
    ("setp.lt.s32 %p1|%p2, %r1, %r2;", ["%p1", "%p2"], ["%r1", "%r2"]),
    ("setp.lt.and.s32 %p3, %r1, %r2, !%p4;", ["%p3"], ["%r1", "%r2", "%p4"]),
    ("atom.global.add.u32 %r1, [%rd1], 1;", ["%r1"], ["%rd1"]),
    ("red.global.add.u32 [%rd1], %r2;", [], ["%rd1", "%r2"]),
    ("bar.sync 0;", [], []),
    ("barrier.sync %r1, %r2;", [], ["%r1", "%r2"]),
    ("@!%p1 bra $L;", [], ["%p1"]),
    ("ret;", [], []),
    ("shfl.sync.bfly.b32 %r1|%p1, %r2, 1, 31, -1;", ["%r1", "%p1"], ["%r2"]),
    ("mbarrier.init.shared.b64 [%rd1], %r1;", [], ["%rd1", "%r1"]),
    ("cp.async.ca.shared.global [%rd1], [%rd2], 16;", [], ["%rd1", "%rd2"]),
    ("st.local.v2.u32 [%rd1], {%r1, %r2};", [], ["%rd1", "%r1", "%r2"]),
    ("mov.u32 %r1, %ctaid.x;", ["%r1"], []),
    ("call.uni (retval0), f, (param0);", [], []),
    ("call (retval0), %rd1, (param0), proto;", [], ["%rd1"]),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%f1, %f2, %f3, %f4}, %rd1, %rd2, 1, 1, 1, 0, 0;",
     ["%f1", "%f2", "%f3", "%f4"], ["%f1", "%f2", "%f3", "%f4", "%rd1", "%rd2"]),
]


@pytest.mark.parametrize("line,defs,uses", DEFS_USES, ids=[d[0] for d in DEFS_USES])
def test_defs_and_uses(line, defs, uses):
    ins = _one(line.replace("$L;", "$L; $L: ret;"))
    assert _names(ins.defs()) == defs
    assert _names(ins.uses()) == uses


MODIFIERS = [
    # line, types, type, state space, rounding, comparison, vector width
    ("cvt.rn.f64.s32 %fd1, %r1;", ("f64", "s32"), "s32", None, "rn", None, 1),
    ("ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];", ("f32",), "f32", "global", None, None, 4),
    ("st.shared::cta.v2.b32 [%r1], {%r2, %r3};", ("b32",), "b32", "shared::cta", None, None, 2),
    ("setp.geu.ftz.f32 %p1, %f1, %f2;", ("f32",), "f32", None, None, "geu", 1),
    ("ld.u32 %r1, [%rd1];", ("u32",), "u32", None, None, None, 1),
    ("bar.sync 0;", (), None, None, None, None, 1),
]


@pytest.mark.parametrize("line,types,type_,space,rounding,comparison,width", MODIFIERS,
                         ids=[m[0] for m in MODIFIERS])
def test_modifier_queries(line, types, type_, space, rounding, comparison, width):
    ins = _one(line)
    assert ins.types == types
    assert ins.type == type_
    assert ins.state_space == space
    assert ins.rounding == rounding
    assert ins.comparison == comparison
    assert ins.vector_width == width


def test_atomic_order_scope_and_full_opcode():
    ins = _one("atom.acq_rel.gpu.global.cas.b32 %r1, [%rd1], %r2, %r3;")
    assert (ins.memory_order, ins.scope, ins.atomic_operation) == ("acq_rel", "gpu", "cas")
    assert ins.full_opcode == "atom.acq_rel.gpu.global.cas.b32"
    assert ins.has("global", "cas") and not ins.has("shared")
    assert _one("add.s32 %r1, %r1, 1;").atomic_operation is None
    assert _one("ld.volatile.global.f32 %f1, [%rd1];").memory_order == "volatile"


NESTED = HEADER + """
.visible .entry k(.param .u32 n)
{
	.reg .b32 %r<4>;
	.reg .pred %p<2>;
	ld.param.u32 %r1, [n];
	{
		.reg .b32 t;
		add.s32 t, %r1, 1;
		{
			mov.u32 %r2, t;
		}
	}
	setp.eq.s32 %p1, %r2, 0;
	@%p1 bra $L__BB0_1;
	bar.sync 0;
$L__BB0_1:
	ret;
}
"""


def test_iter_instructions_walks_nested_blocks_in_order():
    fn = parse_module(NESTED).function("k")
    walked = list(ir.iter_instructions(fn.body))
    assert [i.full_opcode for _b, _x, i in walked] == ["ld.param.u32", "add.s32", "mov.u32",
                                                       "setp.eq.s32", "bra", "bar.sync", "ret"]
    for block, index, ins in walked:
        assert block.statements[index] is ins
    inner = fn.body.statements[3]
    assert walked[1][0] is inner and walked[2][0] is inner.statements[2]
    assert list(fn.body.instructions()) == [i for _b, _x, i in walked]


def test_iter_statements_yields_blocks_before_their_contents():
    fn = parse_module(NESTED).function("k")
    kinds = [type(s).__name__ for _b, _i, s in ir.iter_statements(fn.body)]
    assert kinds[:6] == ["RegDecl", "RegDecl", "Instruction", "Block", "RegDecl", "Instruction"]


def test_name_allocator_avoids_ranges_labels_and_module_symbols():
    source = HEADER + """
.global .u32 $__tally_L_0;
.visible .entry k()
{
	.reg .b32 %tally_r_<3>;
	.reg .b32 %tally_r_3;
$__tally_L_1:
	ret;
}
"""
    module = parse_module(source)
    fn = module.function("k")
    names = ir.NameAllocator(fn, module)
    r = names.new_register("b32")
    assert r == reg("%tally_r_4")
    assert names.new_register("pred", hint="p") == reg("%tally_p_5")
    assert names.new_label() == "$__tally_L_6"
    assert names.is_taken("%tally_r_2") and names.is_taken("$__tally_L_1")
    decls = [s for s in fn.body.statements if isinstance(s, ir.RegDecl)]
    assert decls[-2:] == [ir.RegDecl("b32", "%tally_r_4"), ir.RegDecl("pred", "%tally_p_5")]


def test_allocated_names_assemble(tmp_path):
    module = parse_module(NESTED)
    fn = module.function("k")
    names = ir.NameAllocator(fn, module)
    r = names.new_register("b32")
    label = names.new_label("skip")
    body = fn.body.statements
    at = next(i for i, s in enumerate(body) if isinstance(s, ir.Instruction) and s.opcode == "ret")
    body[at:at] = [instr("mov.u32", r, special("%tid", "x")), instr("bra.uni", ir.label_ref(label)),
                   ir.Label(label)]
    path = tmp_path / "k.ptx"
    path.write_text(print_module(module))
    result = subprocess.run([cuda_tool("ptxas"), "-arch=sm_80", str(path), "-o", "/dev/null"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert parse_module(path.read_text()) == module


def test_builders():
    assert instr("ld.global.f32", reg("%f1"), addr("%rd1", 8)) == \
        ir.Instruction("ld", ("global", "f32"), (reg("%f1"), Address(reg("%rd1"), 8)))
    assert addr("tile") == Address(sym("tile"))
    assert imm(5) == Immediate("5") and imm(-3).value == -3
    assert imm(1.0, "f32").text == "0f3F800000"
    assert imm(0.5, "f64").text == "0d3FE0000000000000"
    assert special("ctaid", "y") == ir.SpecialReg("%ctaid", "y")
    assert str(instr("add.s32", reg("%r1"), reg("%r2"), imm(1), guard=reg("%p1"), negated=True)) == \
        "@!%p1 add.s32 \t%r1, %r2, 1;"
    with pytest.raises(ValueError, match="float immediates need"):
        imm(1.5)
    with pytest.raises(ValueError, match="bad opcode"):
        instr("add..s32")
    with pytest.raises(TypeError, match="not an IR operand"):
        instr("add.s32", "%r1")


def test_immediate_equality_uses_the_spelling_only():
    nan_a = _one("mov.f32 %f1, 0f7FC00000;").operands[1]
    nan_b = _one("mov.f32 %f1, 0f7FC00000;").operands[1]
    assert math.isnan(nan_a.value) and nan_a == nan_b and hash(nan_a) == hash(nan_b)
    assert Immediate("0x10", 16) != Immediate("16", 16)


def test_clone_is_independent():
    module = parse_module(NESTED)
    copy = module.clone()
    assert copy == module
    fn = copy.function("k")
    fn.body.statements[3].statements.append(instr("ret"))
    fn.params.append(ir.Param("extra", "u32"))
    assert copy != module
    assert len(module.function("k").params) == 1
    assert len(module.function("k").body.statements[3].statements) == 3


def test_map_operands_renames_everywhere():
    ins = _one("@%p1 st.global.v2.u32 [%rd1+4], {%r1, %r2};")
    renamed = ir.map_operands(ins, lambda op: reg(op.name + "x") if isinstance(op, ir.Register) else op)
    assert str(renamed) == "@%p1x st.global.v2.u32 \t[%rd1x+4], {%r1x, %r2x};"
    assert ir.map_operands(ins, lambda op: op) is ins


def test_operand_strings():
    assert str(PredPair(reg("%p1"), Sink())) == "%p1|_"
    assert str(Vector((reg("%f1"), Sink()))) == "{%f1, _}"
    assert str(Address(None, 64)) == "[64]"
    assert str(addr("%r1", -8)) == "[%r1+-8]"


def test_known_opcodes_cover_the_corpus_and_reject_typos():
    assert {"ld", "st", "bar", "barrier", "wgmma", "shfl", "vote", "atom", "red", "cvta"} <= ir.KNOWN_OPCODES
    assert "lds" not in ir.KNOWN_OPCODES
