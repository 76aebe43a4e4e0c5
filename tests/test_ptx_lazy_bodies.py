"""Function bodies parsed at their first use (ptx_passes/lazy_bodies.py) and the
emulator's use of it for big modules: the same IR as a whole parse (the corpus round
trip checks every corpus file too: test_ptx_roundtrip.py), braces in comments,
strings, initializers and sections not taken for bodies, a body's error at its use
with the module's line number, and on the emulator a bad body failing only the
launches that reach it."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from ptx_passes import ir, parse_module, print_module
from ptx_passes.errors import PtxParseError
from ptx_passes.lazy_bodies import body_spans
from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend
from tally.backends.emulator import module as emulator_module
from tally.protocol.errors import CUDA_ERROR_INVALID_PTX, DeviceError

PTX = """.version 8.0
.target sm_90
.address_size 64

// a comment with a brace { that opens nothing
/* and a block comment } */
.global .align 4 .u32 table[3] = {1, 2, 3};
.extern .func (.param .b32 func_retval0) declared_only(.param .b32 x);

.func (.param .b32 out) twice(.param .b32 x)
{
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [x];
    add.s32 %r2, %r1, %r1;   // "}" in a comment
    st.param.b32 [out], %r2;
    ret;
}

.visible .entry store_twice(.param .u64 p)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p];
    ld.global.u32 %r1, [table+4];
    {
    .param .b32 a;
    st.param.b32 [a], %r1;
    .param .b32 r;
    call.uni (r), twice, (a);
    ld.param.b32 %r2, [r];
    }
    st.global.u32 [%rd1], %r2;
    ret;
}

.visible .entry broken(.param .u64 p)
{
    .reg .b32 %r<2>;
    this is not an instruction;
}
"""
BROKEN_LINE = PTX.splitlines().index("    this is not an instruction;") + 1


def test_bodies_are_found_past_comments_strings_and_initializers():
    spans = body_spans(PTX)
    assert [PTX[a:b].splitlines()[1].strip() for a, b in spans] == [
        ".reg .b32 %r<3>;", ".reg .b32 %r<4>;", ".reg .b32 %r<2>;"]
    assert body_spans("{ } }") is None and body_spans(".entry f() {") is None
    assert len(body_spans(PTX.replace(".func (.param .b32 out)", ".func(.param .b32 out)"))) == 3


def test_a_lazy_module_reads_the_same_and_parses_a_body_only_when_asked():
    good = PTX[:PTX.index(".visible .entry broken")]
    lazy = parse_module(good, "m", lazy_bodies=True)
    functions = {f.name: f for f in lazy.functions()}
    assert isinstance(functions["twice"], ir.LazyFunction) and not functions["declared_only"].has_body
    assert [e.name for e in lazy.entries()] == ["store_twice"]
    assert not functions["twice"].is_parsed and not functions["store_twice"].is_parsed
    assert print_module(lazy) == print_module(parse_module(good, "m"))     # reads every body
    assert functions["twice"].is_parsed and functions["twice"].body_text is None


def test_a_bad_body_fails_where_it_is_read_naming_the_modules_line():
    lazy = parse_module(PTX, "m.ptx", lazy_bodies=True)     # the module itself loads
    broken = lazy.function("broken")
    for _ in range(2):                                       # and says so every time
        with pytest.raises(PtxParseError) as e:
            _ = broken.body
        assert e.value.line == BROKEN_LINE and "m.ptx" in str(e.value)
    with pytest.raises(PtxParseError) as whole:
        parse_module(PTX, "m.ptx")
    assert whole.value.line == BROKEN_LINE


def test_a_module_whose_header_does_not_parse_reports_as_a_whole_parse_does():
    bad = PTX.replace(".global .align 4 .u32 table[3]", ".global .align 4 .u32 table[3")
    with pytest.raises(PtxParseError) as lazy:
        parse_module(bad, "m", lazy_bodies=True)
    with pytest.raises(PtxParseError) as whole:
        parse_module(bad, "m")
    assert str(lazy.value) == str(whole.value)


@pytest.fixture
def backend(monkeypatch):
    monkeypatch.setattr(emulator_module, "LAZY_BODIES_PTX_BYTES", 1)     # every module is big here
    b = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    yield b
    b.close()


def _launch(backend, module, name, pointer):
    s = backend.stream_create()
    try:
        backend.launch(backend.module_function(module, name), (1, 1, 1), (1, 1, 1), 0, s, struct.pack("<Q", pointer))
        backend.stream_synchronize(s)
    finally:
        backend.stream_destroy(s)


def test_on_the_emulator_a_bad_body_fails_only_the_kernels_that_reach_it(backend):
    module = backend.module_load(ModuleSource(original=PTX.encode(), ptx=PTX))
    assert isinstance(module.ir.function("twice"), ir.LazyFunction)
    out = backend.mem_alloc(4)
    _launch(backend, module, "store_twice", out)
    got = np.zeros(1, np.uint32)
    s = backend.stream_create()
    backend.memcpy_dtoh_async(memoryview(got).cast("B"), out, s)
    backend.stream_synchronize(s)
    backend.stream_destroy(s)
    assert got[0] == 4                                          # table[1] twice
    with pytest.raises(DeviceError) as e:
        _launch(backend, module, "broken", out)
    assert e.value.code == CUDA_ERROR_INVALID_PTX and "broken" in e.value.message
    assert f":{BROKEN_LINE}:5: unknown instruction" in e.value.message
    _launch(backend, module, "store_twice", out)                # the module goes on working
