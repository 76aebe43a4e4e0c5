"""What the parser builds for each PTX construct (tests/data/ptx/all_syntax.ptx holds one of
each; ptxas accepts it), and the errors it reports for malformed input."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from ptx_passes import PtxParseError, ir, parse_module, print_module
from ptx_passes.ir import (Address, Guard, Immediate, InitList, LabelRef, Negated, ParenList,
                           PredPair, Register, Sink, SpecialReg, Symbol, SymbolAddress, Vector,
                           addr, imm, instr, reg, special, sym)

ALL_SYNTAX = Path(__file__).resolve().parent / "data" / "ptx" / "all_syntax.ptx"


@pytest.fixture(scope="module")
def module() -> ir.Module:
    return parse_module(ALL_SYNTAX.read_text(), ALL_SYNTAX.name)


@pytest.fixture(scope="module")
def kernel(module) -> ir.Function:
    return module.function("kernel")


def _find(fn: ir.Function, text: str) -> ir.Instruction:
    """The instruction printed as `text` (nvcc spacing aside)."""
    matches = [i for i in fn.body.instructions() if " ".join(str(i).split()) == text]
    assert len(matches) == 1, f"{text!r}: {len(matches)} matches"
    return matches[0]


def _global(module, name) -> ir.VarDecl:
    return next(v for v in module.globals() if v.name == name)


def test_header(module):
    assert (module.version, module.targets, module.address_size) == ("9.0", ("sm_80",), 64)


def test_multiple_targets_and_no_address_size():
    m = parse_module(".version 8.0\n.target sm_80, texmode_independent, debug\n")
    assert m.targets == ("sm_80", "texmode_independent", "debug")
    assert m.address_size is None and m.items == []


def test_global_variables(module):
    assert _global(module, "counter") == ir.VarDecl("global", "u32", "counter", align=4, init=Immediate("5"))
    table = _global(module, "table")
    assert table.array_dims == (4,)
    assert [i.value for i in table.init.items] == [1, 16, 15, -2]
    assert [i.text for i in table.init.items] == ["1", "0x10", "017", "-2"]
    assert _global(module, "table_address").init == SymbolAddress("table", 0, generic=True)
    assert _global(module, "table_plus").init == SymbolAddress("table", 4)
    vec4 = _global(module, "vec4")
    assert (vec4.vector, vec4.align, vec4.type) == (4, 16, "f32")
    assert [i.value for i in vec4.init.items] == [1.0, 2.0, 1.5, 2.0]
    grid2 = _global(module, "grid2")
    assert grid2.array_dims == (2, 3)
    assert grid2.init == InitList((InitList((Immediate("1"), Immediate("2"), Immediate("3"))),
                                   InitList((Immediate("4"), Immediate("5"), Immediate("6")))))
    assert _global(module, "half_c").init.value == 0.5
    smem = _global(module, "dynamic_smem")
    assert (smem.space, smem.linkage, smem.align, smem.array_dims) == ("shared", ("extern",), 16, (None,))
    assert _global(module, "weak_value").linkage == ("weak",)
    assert _global(module, "managed_value").attributes == ("managed",)


def test_functions_and_parameters(module):
    add_one = module.function("add_one")
    assert (add_one.kind, add_one.linkage) == ("func", ())
    assert add_one.return_params == [ir.Param("retval", "b32")]
    assert add_one.params == [ir.Param("x", "b32")]
    stop = module.function("stop")
    assert stop.linkage == ("visible",) and stop.params == [] and stop.return_params is None
    assert stop.directives == [ir.FunctionDirective("noreturn")]
    kernel = module.function("kernel")
    assert kernel.is_entry and kernel.linkage == ("visible",)
    assert kernel.params == [
        ir.Param("out", "u64", ptr=True, ptr_space="global", ptr_align=4),
        ir.Param("by_value", "b8", align=8, array_dims=(24,)),
        ir.Param("n", "u32"),
    ]
    assert kernel.directive("maxntid") == ir.FunctionDirective("maxntid", (128, 1, 1))
    assert kernel.directive("minnctapersm").args == (2,)
    assert [f.name for f in module.entries()] == ["kernel"]


def test_declarations_in_body(kernel):
    decls = [s for s in kernel.body.statements if isinstance(s, (ir.RegDecl, ir.VarDecl))]
    assert decls[:5] == [ir.RegDecl("pred", "%p", 4), ir.RegDecl("b32", "%r", 20),
                         ir.RegDecl("b64", "%rd", 8), ir.RegDecl("f32", "%f", 4),
                         ir.RegDecl("pred", "q")]
    assert decls[5] == ir.VarDecl("shared", "b8", "tile", align=4, array_dims=(512,))
    assert decls[6] == ir.VarDecl("local", "b8", "depot", align=8, array_dims=(16,))
    assert ir.RegDecl("b32", "%r", 20).declares("%r19")
    assert not ir.RegDecl("b32", "%r", 20).declares("%r20")
    assert not ir.RegDecl("b32", "%r", 20).declares("%r01")


def test_special_registers(kernel):
    sources = [i.operands[1] for i in kernel.body.instructions()
               if i.opcode == "mov" and isinstance(i.operands[1], SpecialReg)]
    assert sources == [special("%tid", "x"), special("%ctaid", "y"), special("%nctaid", "z"),
                       special("laneid"), special("warpid"), special("clock"), special("clock64"),
                       special("smid"), special("globaltimer"), special("lanemask_lt"),
                       special("dynamic_smem_size"), special("envreg3")]


def test_predicates_guards_and_pairs(kernel):
    assert _find(kernel, "setp.ge.u32 %p1|%p2, %r3, %r2;").operands[0] == PredPair(reg("%p1"), reg("%p2"))
    assert _find(kernel, "setp.lt.and.s32 %p3, %r3, 64, !%p1;").operands[3] == Negated(reg("%p1"))
    bra = _find(kernel, "@%p1 bra $L_done;")
    assert bra.guard == Guard(reg("%p1")) and bra.operands == (LabelRef("$L_done"),)
    bra_uni = _find(kernel, "@!%p2 bra.uni $L_done;")
    assert bra_uni.guard == Guard(reg("%p2"), negated=True) and bra_uni.modifiers == ("uni",)
    assert _find(kernel, "shfl.sync.down.b32 %r18|q, %r3, 1, 31, -1;").operands[0] == \
        PredPair(reg("%r18"), reg("q"))


def test_immediates(kernel):
    assert _find(kernel, "add.s32 %r13, %r3, -1;").operands[2] == Immediate("-1")
    assert _find(kernel, "add.s32 %r13, %r3, -1;").operands[2].value == -1
    hex_u = _find(kernel, "add.u32 %r14, %r3, 0xFFU;").operands[2]
    assert (hex_u.text, hex_u.value, hex_u.is_float) == ("0xFFU", 255, False)
    assert _find(kernel, "mul.lo.s32 %r15, %r3, 010;").operands[2].value == 8
    one = _find(kernel, "mov.f32 %f1, 0f3F800000;").operands[1]
    assert (one.text, one.value, one.is_float) == ("0f3F800000", 1.0, True)
    pi = _find(kernel, "add.f32 %f2, %f1, 0f40490FDB;").operands[2].value
    assert math.isclose(pi, math.pi, rel_tol=1e-7)


def test_addresses_vectors_and_symbols(kernel):
    assert _find(kernel, "ld.param.u32 %r1, [by_value+16];").operands[1] == addr("by_value", 16)
    assert _find(kernel, "ld.shared.u32 %r16, [tile];").operands[1] == Address(Symbol("tile"))
    ld4 = _find(kernel, "ld.global.v4.f32 {%f0, _, %f2, %f3}, [%rd1+16];")
    assert ld4.operands == (Vector((reg("%f0"), Sink(), reg("%f2"), reg("%f3"))), addr("%rd1", 16))
    assert _find(kernel, "st.global.u32 [%rd1+-8], %r16;").operands[0] == addr("%rd1", -8)
    assert _find(kernel, "mov.u64 %rd4, table;").operands[1] == sym("table")


def test_inline_asm_scope_registers(kernel):
    # `p` is a register only inside the { } that declares it.
    selp = _find(kernel, "selp.s32 %r19, 1, 0, p;")
    assert selp.operands[3] == Register("p")
    scope = next(s for s in kernel.body.statements if isinstance(s, ir.Block))
    assert scope.statements[0] == ir.RegDecl("pred", "p")
    outside = parse_module(".version 9.0\n.target sm_80\n.entry k() {\n"
                           "{ .reg .pred p; setp.eq.s32 p, 1, 1; }\n mov.u64 %rd1, p;\n}\n")
    assert list(outside.function("k").body.instructions())[-1].operands[1] == Symbol("p")


def test_calls_prototypes_and_jump_tables(kernel):
    call = _find(kernel, "call.uni (retval0), add_one, (param0);")
    assert call.operands == (ParenList((sym("retval0"),)), sym("add_one"), ParenList((sym("param0"),)))
    indirect = _find(kernel, "call (retval0), %fn, (param0), prototype_0;")
    assert indirect.operands[1] == reg("%fn") and indirect.operands[3] == LabelRef("prototype_0")
    statements = [s for _b, _i, s in ir.iter_statements(kernel.body)]
    proto = next(s for s in statements if isinstance(s, ir.CallPrototype))
    assert proto == ir.CallPrototype("prototype_0", (ir.Param("_", "b32"),), (ir.Param("_", "b32"),))
    assert ir.BranchTargets("targets", ("$L_a", "$L_b")) in statements
    assert _find(kernel, "brx.idx %r0, targets;").operands[1] == LabelRef("targets")
    assert ir.Pragma("nounroll") in statements
    assert [s.name for s in statements if isinstance(s, ir.Label)] == ["$L_a", "$L_b", "$L_done"]


def test_instruction_lines_point_at_the_source(kernel):
    lines = ALL_SYNTAX.read_text().splitlines()
    for ins in kernel.body.instructions():
        assert " ".join(lines[ins.line - 1].split()).startswith(ins.opcode) or \
            lines[ins.line - 1].strip().startswith("@")


def test_builders_match_parsed_instructions(kernel):
    assert _find(kernel, "add.s32 %r13, %r3, -1;") == instr("add.s32", reg("%r13"), reg("%r3"), imm(-1))
    assert _find(kernel, "@!%p2 bra.uni $L_done;") == \
        instr("bra.uni", ir.label_ref("$L_done"), guard=reg("%p2"), negated=True)
    assert _find(kernel, "mov.f32 %f1, 0f3F800000;") == instr("mov.f32", reg("%f1"), imm(1.0, "f32"))


LINEINFO_PTX = """
.version 9.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
\t.reg .f32 %f<3>;
\t.loc\t1 3 41
\tmov.f32 %f1, 0f00000000;
\t.loc\t1 2 31, function_name $L__info_string0, inlined_at 1 3 41
\tmul.f32 %f2, %f1, %f1;
\tret;
}
\t.file\t1 "/tmp/inl.cu"
\t.file\t2 "/tmp/other.cu", 1700000000, 1234
\t.section\t.debug_str
\t{
$L__info_string0:
.b8 95,90,52,0
.b64 $L__info_string0+2
\t}
"""


def test_debug_directives():
    m = parse_module(LINEINFO_PTX)
    body = m.function("k").body.statements
    assert body[1] == ir.Loc(1, 3, 41)
    assert body[3] == ir.Loc(1, 2, 31, (",", "function_name", "$L__info_string0", ",", "inlined_at",
                                        "1", "3", "41"))
    assert m.items[1] == ir.FileDirective(1, "/tmp/inl.cu")
    assert m.items[2] == ir.FileDirective(2, "/tmp/other.cu", (",", "1700000000", ",", "1234"))
    assert m.items[3] == ir.Section("debug_str", (
        ir.Label("$L__info_string0"), ir.SectionData("b8", ("95", "90", "52", "0")),
        ir.SectionData("b64", ("$L__info_string0+2",))))
    printed = print_module(m)
    assert "\t.loc\t1 2 31, function_name $L__info_string0, inlined_at 1 3 41\n" in printed
    assert '\t.file\t2 "/tmp/other.cu", 1700000000, 1234\n' in printed
    assert parse_module(printed) == m


def test_comments_are_trivia():
    with_comments = ("// head\n.version 9.0 /* v */\n.target /* t */ sm_80 // x\n"
                     ".entry k() { /* a\n b */ ret; // done\n }\n")
    plain = ".version 9.0\n.target sm_80\n.entry k() { ret; }\n"
    assert parse_module(with_comments) == parse_module(plain)


def test_zero_offset_spelling_is_kept_but_not_compared():
    m = parse_module(".version 9.0\n.target sm_80\n.entry k() { .param .b32 p; st.param.b32 [p+0], 1; ret; }\n")
    st = next(m.function("k").body.instructions())
    assert st.operands[0] == addr("p") and st.operands[0].zero_offset_written
    assert "[p+0]" in print_module(m)


# ------------------------------------------------------------------------------- errors

HEADER = ".version 9.0\n.target sm_80\n"

ERRORS = [
    # (source, line, column, words in the message)
    (HEADER + ".entry k()\n{\n\tfoo.bar %r1;\n}\n", 5, 2, "unknown instruction 'foo'"),
    (HEADER + ".entry k()\n{\n\tadd.s32 %r1, %r2, %r3\n\tret;\n}\n", 6, 2, "expected ',' or ';'"),
    (HEADER + ".entry k()\n{\n\tret;\n", 6, 1, "the block opened at line 4 is not closed"),
    (HEADER + ".entry k()\n{\n\tmov.u32 %r1, #3;\n}\n", 5, 15, "unexpected character '#'"),
    (HEADER + "/* never closed\n.entry k() { ret; }\n", 3, 1, "unterminated /* comment"),
    (HEADER + ".entry k()\n{\n\t.reg .b32 %r<>;\n}\n", 5, 15, "register count"),
    (HEADER + ".entry k()\n{\n\tadd.s32 %r1, %r1, 09;\n}\n", 5, 20, "malformed integer literal '09'"),
    (HEADER + ".entry k()\n{\n\tmov.u32 %r1, %tid.q;\n}\n", 5, 19, "expected .x, .y or .z"),
    (".target sm_80\n", 1, 1, "expected the .version directive"),
    (HEADER + ".entry k(.param .u32 a, )\n{\n}\n", 3, 25, "expected a parameter"),
    (HEADER + ".entry k()\n{\n\t.bogus 3;\n}\n", 5, 2, "unexpected directive '.bogus'"),
    (HEADER + ".entry k()\n{\n\tst.v2.f32 [%rd1], {%f1, %f2;\n}\n", 5, 29, "',' or '}' in the vector"),
    (HEADER + ".global .u32 x = ;\n", 3, 18, "expected an initial value"),
    (HEADER + ".global x;\n", 3, 9, "expected a type"),
    (HEADER + ".entry k()\n{\n\tld.global.u32 %r1, [%rd1+];\n}\n", 5, 27, "offset after '+'"),
    (HEADER + ".entry k()\n{\n\t@%p1 ;\n}\n", 5, 7, "expected an instruction after the guard"),
    (HEADER + "mov.u32 %r1, 1;\n", 3, 1, "at module scope"),
    (HEADER + '.entry k()\n{\n\t.pragma "nounroll;\n}\n', 5, 10, "unterminated string literal"),
]


@pytest.mark.parametrize("source,line,column,words", ERRORS, ids=[e[3] for e in ERRORS])
def test_errors_name_line_and_column(source, line, column, words):
    with pytest.raises(PtxParseError) as info:
        parse_module(source, "bad.ptx")
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    assert words in err.message
    assert str(err).startswith(f"bad.ptx:{line}:{column}: ")
    # The excerpt is the offending line and the caret sits under the error.
    lines = source.splitlines()
    excerpt_line = lines[line - 1].replace("\t", " ") if line <= len(lines) else ""
    assert err.excerpt == excerpt_line[:120]
    if err.excerpt:
        assert str(err).splitlines()[-1] == "  " + " " * (err.caret - 1) + "^"


def test_error_excerpt_of_a_long_line_is_a_window_around_the_column():
    long_line = "\tmov.u32 %r1, " + "1" * 300 + "#;"
    with pytest.raises(PtxParseError) as info:
        parse_module(HEADER + ".entry k()\n{\n" + long_line + "\n}\n")
    err = info.value
    assert len(err.excerpt) == 120
    assert err.excerpt[err.caret - 1] == "#"


def test_parse_error_is_a_value_error():
    assert issubclass(PtxParseError, ValueError)


def test_bytes_input_is_a_type_error_with_advice():
    with pytest.raises(TypeError, match="decode bytes first"):
        parse_module(b".version 9.0")


def test_deep_nesting_is_a_parse_error_not_a_crash():
    source = HEADER + ".entry k()\n" + "{" * 5000 + "}" * 5000 + "\n"
    with pytest.raises(PtxParseError, match="nest"):
        parse_module(source)
    source = HEADER + ".global .u32 x[1] = " + "{" * 5000 + "1" + "}" * 5000 + ";\n"
    with pytest.raises(PtxParseError, match="nests too deeply"):
        parse_module(source)


def test_sm90_directives_and_cluster_registers():
    m = parse_module((ALL_SYNTAX.parent / "sm90_features.ptx").read_text())
    cluster = m.function("cluster_kernel")
    assert cluster.directives == [ir.FunctionDirective("reqntid", (128, 1, 1)),
                                  ir.FunctionDirective("reqnctapercluster", (2, 1, 1))]
    assert m.function("capped_kernel").directives == [
        ir.FunctionDirective("explicitcluster"), ir.FunctionDirective("maxnreg", (32,)),
        ir.FunctionDirective("maxclusterrank", (8,))]
    assert m.function("bounded_kernel").directives[-1] == ir.FunctionDirective("pragma", ('"nounroll"',))
    specials = [i.operands[1] for i in cluster.body.instructions() if i.opcode == "mov"
                and isinstance(i.operands[1], SpecialReg)]
    assert specials == [special("cluster_ctarank"), special("cluster_nctarank"),
                        special("clusterid", "x"), special("is_explicit_cluster")]
    elect = _find(cluster, "elect.sync %r6|%p1, -1;")
    assert elect.defs() == (reg("%r6"), reg("%p1"))
    red = _find(cluster, "red.relaxed.gpu.global.max.s32 [%rd2+8], %r2;")
    assert (red.defs(), red.atomic_operation, red.scope) == ((), "max", "gpu")
    assert _find(cluster, "ld.shared::cluster.u32 %r8, [%r7];").state_space == "shared::cluster"
