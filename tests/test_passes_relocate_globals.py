"""The relocation pass (ptx_passes/passes/relocate_globals.py): a module's
.global/.const variables move to storage the loader places, reached through a
.const table of addresses. PTX in and PTX out; ptxas -arch=sm_90 as the oracle
for what comes out; and the rewritten kernels run on the emulator, loaded the
way the cuda backend loads them with --suspendable (tally/backends/
relocated_globals.py), with results exactly those of the original module."""
from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest
from emulator_corpus import CASES, check_case, run_case
from passes_support import PASS_SOURCES, run_ptxas
from ptx_corpus import CORPUS_DIR, compile_ptx

from ptx_passes import parse_module, print_module
from ptx_passes.ir import iter_instructions
from ptx_passes.passes import PassRefused
from ptx_passes.passes.relocate_globals import TABLE, module_variables, relocate_globals
from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend
from tally.backends.relocated_globals import has_variables, relocate

HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"

SMALL = HEADER + """
.global .align 4 .u32 hits;
.const .align 4 .b8 coef[8] = {0, 0, 128, 63, 0, 0, 0, 64};

.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<3>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    atom.global.add.u32 %r1, [hits], 1;
    ld.const.f32 %f1, [coef+4];
    mov.u64 %rd2, coef;
    cvta.const.u64 %rd3, %rd2;
    st.f32 [%rd1], %f1;
    ret;
}
"""


def instructions(ptx_module, kernel: str) -> list[str]:
    return [str(i) for _b, _i, i in iter_instructions(ptx_module.function(kernel).body)]


def test_each_use_reads_the_variables_address_from_the_table():
    relocation = relocate_globals(parse_module(SMALL, "small"))
    assert [(v.name, v.slot, v.space) for v in relocation.variables] == [("hits", 0, "global"), ("coef", 1, "const")]
    module = relocation.module
    assert [v.name for v in module.globals()] == [TABLE]
    assert module.globals()[0].space == "const" and module.globals()[0].array_dims == (2,)
    code = instructions(module, "k")
    hits_generic, hits_global = code[1].split()[1].rstrip(","), code[2].split()[1].rstrip(",")
    assert code[1:4] == [f"ld.const.u64 \t{hits_generic}, [{TABLE}];",
                         f"cvta.to.global.u64 \t{hits_global}, {hits_generic};",
                         f"atom.global.add.u32 \t%r1, [{hits_global}], 1;"]
    # constant data: read through the read-only global path, at the variable's offset
    coef_global = code[5].split()[1].rstrip(",")
    assert code[4].startswith("ld.const.u64") and code[4].endswith(f"[{TABLE}+8];")
    assert code[6] == f"ld.global.nc.f32 \t%f1, [{coef_global}+4];"
    # its address as a value is a global-space address now, made generic as such
    assert code[9] == f"mov.u64 \t%rd2, {coef_global};"
    assert code[10] == "cvta.global.u64 \t%rd3, %rd2;"
    # a generic access keeps its register; nothing else changed
    assert code[11] == "st.f32 \t[%rd1], %f1;" and code[0] == "ld.param.u64 \t%rd1, [out];"
    # what comes out parses back to itself
    text = print_module(module)
    assert parse_module(text, "again").items == module.items


def test_a_module_without_variables_is_left_alone():
    plain = HEADER + """.visible .entry k(.param .u64 p)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.u32 %r1, [%rd2];
    ret;
}
"""
    assert not has_variables(plain) and relocate(plain) is None
    shared_only = HEADER + ".visible .entry k()\n{\n    .shared .align 4 .b8 s[64];\n    ret;\n}\n"
    assert module_variables(parse_module(shared_only, "s")) == [] and relocate(shared_only) is None


def test_compiler_literals_stay_in_the_module():
    # printf's format strings: no program can name them, and device printf reads them where
    # the driver put them; a variable whose initializer points at one cannot move.
    ptx = HEADER + """
.global .align 1 .b8 $str[3] = {104, 105, 0};
.global .align 4 .u32 count;

.visible .entry k()
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;
    mov.u64 %rd1, $str;
    cvta.global.u64 %rd2, %rd1;
    st.global.u32 [count], 1;
    ret;
}
"""
    relocation = relocate_globals(parse_module(ptx, "literals"))
    assert [v.name for v in relocation.variables] == ["count"]
    assert [v.name for v in relocation.module.globals()] == ["$str", TABLE]
    assert "mov.u64 \t%rd1, $str;" in instructions(relocation.module, "k")
    pointing = HEADER + ".global .align 1 .b8 $str[3] = {104, 105, 0};\n.global .align 8 .u64 msg = generic($str);\n"
    with pytest.raises(PassRefused, match=r"initializer of msg takes the address of \$str"):
        relocate_globals(parse_module(pointing, "pointing"))


@pytest.mark.parametrize("body, reason", [
    (".global .align 8 .u64 fp = f;\n.func f()\n{\n    ret;\n}\n", "takes the address of f"),
    (".global .texref tex;\n", "is a .texref, not memory"),
    (".extern .global .align 4 .u32 elsewhere;\n", "an .extern variable"),
    (".visible .entry k()\n{\n    .global .align 4 .u32 local_static;\n    ret;\n}\n",
     "declares .global variable local_static in its scope"),
    (f".global .align 4 .u32 {TABLE};\n", f"already has a symbol named {TABLE}"),
    (".global .attribute(.managed) .align 4 .u32 shared_with_cpu;\n", "shared_with_cpu is __managed__"),
    (".const .align 1 .b8 $lit[2] = {1, 2};\n.const .align 4 .u32 c;\n", "compiler literal $lit is constant data"),
])
def test_what_cannot_move_is_refused_with_the_reason(body, reason):
    with pytest.raises(PassRefused) as refused:
        relocate_globals(parse_module(HEADER + body, "refused"))
    assert reason in str(refused.value)


def test_32_bit_addressing_is_refused():
    ptx = ".version 8.0\n.target sm_90\n.address_size 32\n.global .align 4 .u32 x;\n"
    with pytest.raises(PassRefused, match="32-bit addresses"):
        relocate_globals(parse_module(ptx, "narrow"))


def module_globals_ptx() -> str:
    return compile_ptx(PASS_SOURCES / "module_globals.cu", "sm_90")


def test_ptxas_assembles_the_relocated_modules(tmp_path):
    sources = [("module_globals", module_globals_ptx())]
    sources += [(case, compile_ptx(CORPUS_DIR / f"{case}.cu", "sm_90"))
                for case in ("constant_array", "device_global")]
    for name, ptx in sources:
        relocated = relocate(ptx)
        assert relocated is not None, name
        path = tmp_path / f"{name}.ptx"
        path.write_text(relocated.ptx)
        run = run_ptxas(path, "sm_90")
        assert run.ok, run.failure()


# ---------------------------------------------------------------------------- on the emulator


class RelocatingEmulator:
    """The emulator, loading modules the way the cuda backend does with --suspendable:
    the relocated PTX, its variables in one block of device memory, their initial bytes
    and the table written by the loader (tally/backends/relocated_globals.py)."""

    def __init__(self, backend: EmulatorBackend):
        self.backend = backend
        self.placed: dict[int, dict[str, tuple[int, int]]] = {}
        self.blocks: dict[int, int] = {}

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def module_load(self, source: ModuleSource):
        relocated = relocate(source.ptx)
        module = self.backend.module_load(ModuleSource(original=b"", ptx=relocated.ptx))
        base = self.backend.mem_alloc(relocated.nbytes)
        where = relocated.addresses(base)
        stream = self.backend.stream_create()
        keep = [relocated.table_bytes(where)]
        for name, data in relocated.initial_bytes(where).items():
            keep.append(data)
            self.backend.memcpy_htod_async(where[name], memoryview(data), stream)
        table, size = self.backend.module_global(module, relocated.table)
        assert size == len(keep[0])
        self.backend.memcpy_htod_async(table, memoryview(keep[0]), stream)
        self.backend.stream_synchronize(stream)
        self.backend.stream_destroy(stream)
        self.placed[id(module)] = {v.name: (where[v.name], v.size) for v in relocated.variables}
        self.blocks[id(module)] = base
        return module

    def module_global(self, module, name: str) -> tuple[int, int]:
        return self.placed[id(module)][name]

    def module_unload(self, module) -> None:
        self.backend.module_unload(module)
        self.backend.mem_free(self.blocks.pop(id(module)))


@pytest.fixture(scope="module")
def emulator():
    backend = EmulatorBackend(printf_to_stdout=False)
    yield backend
    backend.close()


@pytest.mark.parametrize("case", [c for c in CASES if c.source in
                                  ("constant_array.cu", "device_global.cu")],
                         ids=lambda c: c.id)
def test_corpus_kernels_with_variables_match_numpy_relocated(emulator, case):
    ptx = compile_ptx(CORPUS_DIR / case.source, "sm_90")
    loader = RelocatingEmulator(emulator)
    module = loader.module_load(ModuleSource(original=b"", ptx=ptx))
    try:
        check_case(case, run_case(loader, module, case))
    finally:
        loader.module_unload(module)


def run_module_globals(backend, module, global_of) -> dict[str, object]:
    """use_globals, addresses and read_through on one module; what they wrote and what
    its variables hold afterwards."""
    n, block = 200, 64
    x = np.random.default_rng(17).standard_normal(n).astype(np.float32)
    stream = backend.stream_create()
    buffers = {name: backend.mem_alloc(size) for name, size in (("in", n * 4), ("out", n * 4), ("addr", 40),
                                                                 ("through", 16))}
    out = {"out": np.zeros(n, np.float32), "addr": np.zeros(5, np.uint64), "through": np.zeros(4, np.float32)}
    try:
        backend.memcpy_htod_async(buffers["in"], memoryview(x).cast("B"), stream)

        def launch(kernel, grid, threads, *args):
            fn = backend.module_function(module, kernel)
            backend.launch(fn, (grid, 1, 1), (threads, 1, 1), 0, stream, b"".join(args))

        launch("use_globals", -(-n // block), block, struct.pack("<QQi", buffers["in"], buffers["out"], n))
        launch("addresses", 1, 1, struct.pack("<Q", buffers["addr"]))
        launch("read_through", 1, 4, struct.pack("<QQ", global_of("coef")[0], buffers["through"]))
        for name, array in out.items():
            backend.memcpy_dtoh_async(memoryview(array).cast("B"), buffers[name], stream)
        for name, dtype in (("hits", np.int32), ("table", np.float32), ("wide", np.uint64)):
            ptr, size = global_of(name)
            out[name] = np.zeros(size // np.dtype(dtype).itemsize, dtype)
            backend.memcpy_dtoh_async(memoryview(out[name]).cast("B"), ptr, stream)
        backend.stream_synchronize(stream)
    finally:
        for ptr in buffers.values():
            backend.mem_free(ptr)
        backend.stream_destroy(stream)
    return out


def test_relocated_kernels_give_exactly_the_original_results(emulator):
    ptx = module_globals_ptx()
    original = emulator.module_load(ModuleSource(original=b"", ptx=ptx))
    loader = RelocatingEmulator(emulator)
    relocated = loader.module_load(ModuleSource(original=b"", ptx=ptx))
    try:
        before = run_module_globals(emulator, original, lambda n: emulator.module_global(original, n))
        after = run_module_globals(emulator, relocated, lambda n: loader.module_global(relocated, n))
        for got in (before, after):
            assert got["hits"][0] == 200
            assert list(got["through"]) == [0.5, 1.5, -2.0, 4.0]            # __constant__ coef, read by address
            assert got["table"][2] == 103.0 and got["wide"][1] == 43          # written through third, and wide[1]
            assert got["addr"][4] == 0x0123456789abcdef + 42
        np.testing.assert_array_equal(after["out"], before["out"])           # bit for bit
        for name in ("hits", "table", "wide", "through"):
            np.testing.assert_array_equal(after[name], before[name])
        # the addresses the kernels took are the ones the loader placed (the job's, from cuModuleGetGlobal)
        where = {n: loader.module_global(relocated, n)[0] for n in ("hits", "table", "coef")}
        assert list(after["addr"][:4]) == [where["hits"], where["table"] + 12, where["table"] + 8, where["coef"] + 4]
    finally:
        loader.module_unload(relocated)
        emulator.module_unload(original)


def test_modules_the_cuda_backend_keeps_where_the_driver_puts_them(nvcc, tmp_path):
    # What tally/backends/cuda_globals.py decides before loading: a module that comes only as
    # cubins and has variables (found in the cubin's symbol table) and one the pass refuses are
    # pinned, with the reason; one without variables needs nothing.
    from tally.backends.cuda_globals import relocation_of
    cubin = tmp_path / "globals.cubin"
    subprocess.run([nvcc, "-arch=sm_90", "-cubin", str(PASS_SOURCES / "module_globals.cu"), "-o", str(cubin)],
                   check=True)
    relocated, why = relocation_of(ModuleSource(original=b"", cubins={90: cubin.read_bytes()}))
    assert relocated is None
    assert "comes only as cubins and has variables (coef, hits, step, table, ...)" in why
    relocated, why = relocation_of(ModuleSource(original=b"", ptx=HEADER + ".global .texref t;\n"))
    assert relocated is None and "t is a .texref, not memory" in why
    assert relocation_of(ModuleSource(original=b"", ptx=HEADER)) == (None, None)
    relocated, why = relocation_of(ModuleSource(original=b"", ptx=module_globals_ptx()))
    assert why is None and [v.name for v in relocated.variables] == ["hits", "table", "third", "wide", "coef", "step"]
