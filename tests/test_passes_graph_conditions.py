"""ptx_passes/passes/graph_conditions.py: a module that calls cudaGraphSetConditional
gets tally's definition (a 32-bit store to the handle) where it declared the
driver's, and the result is PTX that ptxas accepts and the JIT linker leaves the
declaration to (it is the driver's, like vprintf)."""
from __future__ import annotations

import subprocess

import pytest
from e2e_helpers import build_device_code

from ptx_passes.linking import link_ptx
from ptx_passes.parser import parse_module
from ptx_passes.passes.graph_conditions import NAME, define_set_conditional, sets_conditions
from ptx_passes.printer import print_module

PLAIN = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p) { ret; }
"""

WRONG_PROTOTYPE = """
.version 8.0
.target sm_80
.address_size 64
.extern .func cudaGraphSetConditional(.param .b64 handle);
.visible .entry k(.param .u64 p) { ret; }
"""


def test_the_declaration_becomes_a_store_ptxas_takes(nvcc, ptxas, tmp_path):
    text = build_device_code(nvcc, "graph_conditional.cu", "ptx").read_text()
    module = parse_module(text)
    assert sets_conditions(module)
    assert define_set_conditional(module)
    assert not sets_conditions(module)
    [defined] = [f for f in module.functions() if f.name == NAME]
    stores = [ins for ins in defined.body.instructions() if ins.opcode == "st"]
    assert [s.full_opcode for s in stores] == ["st.global.u32"]
    out = tmp_path / "defined.ptx"
    out.write_text(print_module(module))
    run = subprocess.run([ptxas, "-arch=sm_90", str(out), "-o", str(tmp_path / "defined.cubin")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    # the definition stands where the declaration stood, before every kernel calling it
    names = [f.name for f in module.functions()]
    assert names.index(NAME) < min(names.index(k.name) for k in module.entries())


def test_a_module_without_it_is_left_alone():
    module = parse_module(PLAIN)
    assert not define_set_conditional(module)
    assert print_module(module) == print_module(parse_module(PLAIN))


def test_a_declaration_of_another_shape_is_refused():
    with pytest.raises(ValueError, match="1 parameters"):
        define_set_conditional(parse_module(WRONG_PROTOTYPE))


def test_the_jit_linker_leaves_it_to_the_driver(nvcc):
    text = build_device_code(nvcc, "graph_conditional.cu", "ptx", flags=("-rdc=true",)).read_text()
    linked = link_ptx([("graph_conditional.ptx", text)])
    assert sets_conditions(parse_module(linked.text))
