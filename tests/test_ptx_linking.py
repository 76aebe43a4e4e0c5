"""ptx_passes.linking: several PTX modules become one, with extern symbols resolved,
local names kept apart, weak/strong rules and errors that name the symbol. ptxas is
the oracle that the linked module is valid PTX; `-rdc=true` PTX from nvcc is a real input."""
from __future__ import annotations

import pytest
from passes_support import run_ptxas
from ptx_corpus import compile_ptx

from ptx_passes import parse_module
from ptx_passes.ir import Function, Symbol, VarDecl, iter_instructions
from ptx_passes.linking import LinkError, link_ptx

HEADER = ".version {version}\n.target {target}\n.address_size 64\n"

CALLER = HEADER + """
.extern .func (.param .b32 func_retval0) add_bias(.param .b32 x);
.extern .global .align 4 .u32 bias;

.visible .entry kernel(.param .u64 out)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [out];
	ld.global.u32 %r2, [bias];
	{
	.param .b32 param0;
	st.param.b32 [param0+0], %r2;
	.param .b32 retval0;
	call.uni (retval0), add_bias, (param0);
	ld.param.b32 %r1, [retval0+0];
	}
	st.global.u32 [%rd1], %r1;
	ret;
}
"""

CALLEE = HEADER + """
.visible .global .align 4 .u32 bias = 7;

.visible .func (.param .b32 func_retval0) add_bias(.param .b32 x)
{
	.reg .b32 %r<4>;
	ld.param.b32 %r1, [x];
	ld.global.u32 %r2, [bias];
	add.s32 %r3, %r1, %r2;
	st.param.b32 [func_retval0+0], %r3;
	ret;
}
"""


def ptx(template: str, version: str = "8.0", target: str = "sm_80") -> str:
    return template.replace("{version}", version).replace("{target}", target)


def check_with_ptxas(text: str, tmp_path, arch: str = "sm_80") -> None:
    path = tmp_path / "linked.ptx"
    path.write_text(text)
    run = run_ptxas(path, arch)
    assert run.ok, run.failure()


def definitions(text: str, name: str) -> list:
    module = parse_module(text)
    return [i for i in module.items if isinstance(i, (Function, VarDecl)) and i.name == name
            and (not isinstance(i, Function) or i.body is not None)]


def test_extern_function_and_variable_resolve_across_inputs(tmp_path):
    linked = link_ptx([("caller.ptx", ptx(CALLER)), ("callee.ptx", ptx(CALLEE))], verbose=True)
    check_with_ptxas(linked.text, tmp_path)
    assert len(definitions(linked.text, "add_bias")) == 1
    assert len(definitions(linked.text, "bias")) == 1
    assert ".extern" not in linked.text
    # The variable is defined before the kernel that reads it, with its initializer.
    assert linked.text.index(".visible .global .align 4 .u32 bias = 7;") < linked.text.index(".entry kernel")
    assert "'add_bias' used in caller.ptx resolved to callee.ptx" in linked.log
    assert "'bias' used in caller.ptx resolved to callee.ptx" in linked.log


def test_definitions_before_uses_link_too(tmp_path):
    linked = link_ptx([("callee.ptx", ptx(CALLEE)), ("caller.ptx", ptx(CALLER))])
    check_with_ptxas(linked.text, tmp_path)
    assert len(definitions(linked.text, "add_bias")) == 1


def test_unresolved_extern_names_symbol_and_input():
    with pytest.raises(LinkError) as e:
        link_ptx([("caller.ptx", ptx(CALLER))])
    assert e.value.problems == (
        "undefined reference to 'add_bias' in caller.ptx: no input defines this function "
        "(add the PTX that defines it with cuLinkAddData)",
        "undefined reference to 'bias' in caller.ptx: no input defines this variable "
        "(add the PTX that defines it with cuLinkAddData)")


def test_two_strong_definitions_are_an_error():
    with pytest.raises(LinkError, match=r"multiple definition of 'add_bias' in b.ptx \(first defined in a.ptx\)"):
        link_ptx([("a.ptx", ptx(CALLEE)), ("b.ptx", ptx(CALLEE).replace(".visible .global", ".weak .global"))])


WEAK = HEADER + """
.weak .func (.param .b32 func_retval0) pick()
{
	.reg .b32 %r<2>;
	mov.u32 %r1, {value};
	st.param.b32 [func_retval0+0], %r1;
	ret;
}
"""

USES_PICK = HEADER + """
.extern .func (.param .b32 func_retval0) pick();
.visible .entry use_pick(.param .u64 out)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<2>;
	ld.param.u64 %rd1, [out];
	{
	.param .b32 retval0;
	call.uni (retval0), pick, ();
	ld.param.b32 %r1, [retval0+0];
	}
	st.global.u32 [%rd1], %r1;
	ret;
}
"""


def _returned_constant(text: str, name: str) -> str:
    (fn,) = definitions(text, name)
    (mov,) = [i for _, _, i in iter_instructions(fn.body) if i.opcode == "mov"]
    return str(mov.operands[1])


def test_first_weak_definition_wins(tmp_path):
    linked = link_ptx([("use.ptx", ptx(USES_PICK)), ("w1.ptx", ptx(WEAK).replace("{value}", "1")),
                       ("w2.ptx", ptx(WEAK).replace("{value}", "2"))])
    check_with_ptxas(linked.text, tmp_path)
    assert _returned_constant(linked.text, "pick") == "1"
    assert "'pick': kept the weak definition from w1.ptx, dropped the weak one in w2.ptx" in linked.log


def test_strong_definition_beats_weak_ones(tmp_path):
    strong = ptx(WEAK).replace(".weak .func", ".visible .func").replace("{value}", "3")
    linked = link_ptx([("w1.ptx", ptx(WEAK).replace("{value}", "1")), ("use.ptx", ptx(USES_PICK)),
                       ("strong.ptx", strong)])
    check_with_ptxas(linked.text, tmp_path)
    assert _returned_constant(linked.text, "pick") == "3"


LOCALS = HEADER + """
.global .align 4 .u32 table[2] = {{first}, 0};
.func (.param .b32 func_retval0) helper()
{
	.reg .b32 %r<2>;
	ld.global.u32 %r1, [table];
	st.param.b32 [func_retval0+0], %r1;
	ret;
}
.visible .entry {entry}(.param .u64 out)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [out];
	{
	.param .b32 retval0;
	call.uni (retval0), helper, ();
	ld.param.b32 %r1, [retval0+0];
	}
	mov.u64 %rd2, table;
	st.global.u32 [%rd1], %r1;
	ret;
}
"""


def test_local_symbols_with_the_same_name_are_kept_apart(tmp_path):
    a = ptx(LOCALS).replace("{first}", "10").replace("{entry}", "ka")
    b = ptx(LOCALS).replace("{first}", "20").replace("{entry}", "kb")
    linked = link_ptx([("a.ptx", a), ("b.ptx", b)])
    check_with_ptxas(linked.text, tmp_path)
    module = parse_module(linked.text)
    names = [i.name for i in module.items if isinstance(i, (Function, VarDecl))]
    assert names == ["table", "helper", "ka", "table__tally_in1", "helper__tally_in1", "kb"]
    kb = module.function("kb")
    symbols = {op.name for _, _, ins in iter_instructions(kb.body) for op in ins.operands if isinstance(op, Symbol)}
    assert {"helper__tally_in1", "table__tally_in1"} <= symbols
    assert not {"helper", "table"} & symbols
    assert "b.ptx: local symbol 'table' renamed 'table__tally_in1' (another input uses the name)" in linked.log


PRINTS = HEADER + """
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 fmt, .param .b64 args);
.extern .shared .align {align} .b8 smem[];
.global .align 1 .b8 fmt_{entry}[3] = {104, 105, 0};
.visible .entry {entry}()
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<3>;
	mov.u64 %rd1, fmt_{entry};
	cvta.global.u64 %rd2, %rd1;
	mov.u64 %rd1, 0;
	{
	.param .b64 param0;
	st.param.b64 [param0+0], %rd2;
	.param .b64 param1;
	st.param.b64 [param1+0], %rd1;
	.param .b32 retval0;
	call.uni (retval0), vprintf, (param0, param1);
	}
	ld.shared.u32 %r1, [smem];
	ret;
}
"""


def test_system_calls_stay_external_and_shared_externs_merge(tmp_path):
    a = ptx(PRINTS).replace("{align}", "4").replace("{entry}", "pa")
    b = ptx(PRINTS).replace("{align}", "16").replace("{entry}", "pb")
    linked = link_ptx([("a.ptx", a), ("b.ptx", b)])
    check_with_ptxas(linked.text, tmp_path)
    module = parse_module(linked.text)
    externs = [i for i in module.items if "extern" in i.linkage]
    assert [(i.name, getattr(i, "align", None)) for i in externs] == [("vprintf", None), ("smem", 16)]


def test_header_is_the_newest_version_and_highest_target(tmp_path):
    linked = link_ptx([("caller.ptx", ptx(CALLER, "7.8", "sm_75")), ("callee.ptx", ptx(CALLEE, "8.3", "sm_80"))])
    module = parse_module(linked.text)
    assert (module.version, module.targets) == ("8.3", ("sm_80",))
    check_with_ptxas(linked.text, tmp_path)


def test_mismatched_declaration_links_through_an_adapter(tmp_path):
    # nvJitLink 13.0 links a declaration whose parameters or return value differ from
    # the definition's (it prints "Prototype doesn't match" and goes on); calls through
    # the declaration reach the definition through an adapter with the declared prototype.
    caller = ptx(CALLER).replace(".extern .func (.param .b32 func_retval0) add_bias(.param .b32 x)",
                                 ".extern .func (.param .b64 func_retval0) add_bias(.param .b32 x)")
    caller = caller.replace(".param .b32 retval0;", ".param .b64 retval0;")
    linked = link_ptx([("caller.ptx", caller), ("callee.ptx", ptx(CALLEE))])
    assert any("the declaration of 'add_bias' in caller.ptx differs from its definition in callee.ptx" in line
               for line in linked.log)
    module = parse_module(linked.text)
    assert "add_bias__tally_as_declared_in0" in {f.name for f in module.functions()}
    check_with_ptxas(linked.text, tmp_path)


def test_library_members_link_only_when_needed(tmp_path):
    from ptx_passes.linking import LinkInput, link_inputs, read_link_input
    unused = ptx(HEADER + ".visible .func (.param .b32 r) spare(.param .b32 x)\n{\n\tret;\n}\n")
    inputs = [read_link_input("caller.ptx", ptx(CALLER)),
              LinkInput("lib.a(spare.o)", unused, parse_module(unused), library=True),
              LinkInput("lib.a(callee.o)", ptx(CALLEE), parse_module(ptx(CALLEE)), library=True)]
    linked = link_inputs(inputs)
    assert "lib.a(callee.o): linked for add_bias, bias" in linked.log
    assert "lib.a(spare.o): not linked (nothing refers to what it defines)" in linked.log
    assert "spare" not in {f.name for f in parse_module(linked.text).functions()}
    check_with_ptxas(linked.text, tmp_path)


def test_function_and_variable_of_one_name_are_an_error():
    other = ptx(HEADER + ".visible .global .u32 add_bias;\n")
    with pytest.raises(LinkError, match="'add_bias' is a function in callee.ptx and a variable in other.ptx"):
        link_ptx([("callee.ptx", ptx(CALLEE)), ("other.ptx", other)])


def test_bad_ptx_and_no_input_are_errors():
    with pytest.raises(LinkError, match=r"^broken.ptx: not valid PTX: broken.ptx:\d+:\d+: "):
        link_ptx([("broken.ptx", ptx(HEADER) + ".visible .entry k( {")])
    with pytest.raises(LinkError, match="nothing to link"):
        link_ptx([])


def test_one_input_is_handed_on_unchanged():
    text = ptx(CALLEE)
    assert link_ptx([("callee.ptx", text)]).text == text


RDC_MAIN = """
extern __device__ float scaled(float x);
extern __device__ int calls;
__global__ void apply(float* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { v[i] = scaled(v[i]); atomicAdd(&calls, 1); }
}
"""
RDC_LIB = """
__device__ int calls;
__device__ float factor() { return 3.0f; }
__device__ float scaled(float x) { return factor() * x; }
"""


def test_nvcc_rdc_translation_units_link(tmp_path):
    main = tmp_path / "main.cu"
    lib = tmp_path / "lib.cu"
    main.write_text(RDC_MAIN)
    lib.write_text(RDC_LIB)
    linked = link_ptx([("main", compile_ptx(main, "sm_80", ("-rdc=true",))),
                       ("lib", compile_ptx(lib, "sm_80", ("-rdc=true",)))])
    check_with_ptxas(linked.text, tmp_path)
    module = parse_module(linked.text)
    assert [e.name for e in module.entries()] == ["_Z5applyPfi"]
    assert len(definitions(linked.text, "_Z6scaledf")) == 1


UNREACHED_EXTERN = HEADER + """
.extern .func driver_only();
.visible .func unused_helper()
{
	{
	call.uni driver_only, ();
	}
	ret;
}
"""


def test_unresolved_references_only_unreachable_code_makes_are_left_out(tmp_path):
    # As in nvcc's device runtime, linked into every -rdc program: its functions call
    # the driver's own, and no kernel of the program calls them.
    linked = link_ptx([("caller.ptx", ptx(CALLER)), ("callee.ptx", ptx(CALLEE)),
                       ("runtime.ptx", ptx(UNREACHED_EXTERN))])
    check_with_ptxas(linked.text, tmp_path)
    assert "driver_only" not in linked.text and "unused_helper" not in linked.text
    assert "left out 1 function(s) that no kernel calls" in linked.log


def test_unreachable_code_is_kept_out_of_a_single_input_too(tmp_path):
    text = ptx(CALLEE) + ptx(UNREACHED_EXTERN).split(".address_size 64\n", 1)[1]
    linked = link_ptx([("one.ptx", text)])
    check_with_ptxas(linked.text, tmp_path)
    assert "driver_only" not in linked.text and "add_bias" not in linked.text
    assert len(definitions(linked.text, "bias")) == 1   # variables stay: the host may read them
