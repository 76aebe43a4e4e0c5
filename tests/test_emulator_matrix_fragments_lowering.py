"""ldmatrix/stmatrix lower to the emulator's handlers; forms it cannot run are refused by name."""
import pytest

from ptx_passes.parser import parse_module
from tally.backends.emulator.lowering import LoweringError, lower_kernel

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k(){\n.reg .b32 r<8>; .reg .b64 rd<3>;\n"


def _lower(body: str):
    return lower_kernel(parse_module(HEADER + body + "\nret;}"), "k", {})


def test_every_m8n8_form_lowers():
    k = _lower("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {r0,r1,r2,r3}, [rd1+16];\n"
               "stmatrix.sync.aligned.m8n8.x2.shared.b16 [rd1], {r0,r1};\n"
               "ldmatrix.sync.aligned.m8n8.x1.b16 {r0}, [rd1];")
    assert len(k.program) == 5  # three instructions, the ret and the ret lowering appends


def test_register_count_must_match_the_matrix_count():
    with pytest.raises(LoweringError, match="with 2 registers"):
        _lower("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {r0,r1}, [rd1];")
