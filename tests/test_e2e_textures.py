"""Texture and surface objects on the emulator (tests/cuda/programs/textures.cu checks
each fetch against the programming guide's definition, computed on the CPU): every
resource form, filter, address mode and read mode, gathers and surfaces, at both
priorities and as a best-effort job's sliced and PTB variants next to a high-priority
job; the creations the driver (or tally) refuses; a fetch through a handle that names
no texture faults its own job only."""
from __future__ import annotations

import pytest
from e2e_helpers import (best_effort_beside_inference, build_cuda, emulator_server, finish, run_job,  # noqa: F401
                         start_job, tally_server, tell)

INVALID_VALUE, NOT_SUPPORTED = 1, 801
INVALID_FILTER_SETTING = 26      # cudart's own check, before the driver is asked

EVERY_FETCH = ("linear_good", "pitch2d_good", "clamp_good", "linear2d_good", "wrap_good", "mirror_good",
               "border_good", "int_good", "element_good", "gather_good", "grid_good")
ARRAY_FORMS = ("volume_good", "trilinear_good", "layered_good", "cube_good", "surface_good", "surface3d_good",
               "surface_layered_good")


@pytest.fixture(scope="module")
def program(nvcc):
    return build_cuda(nvcc, "textures.cu")


def all_good(stdout: str, key: str) -> bool:
    """`key=N of N` on the job's stdout (every fetch equal to the reference)."""
    for line in stdout.splitlines():
        tokens = line.split()
        for i, token in enumerate(tokens):
            if token.startswith(key + "="):
                return tokens[i + 2] == token.split("=", 1)[1] and tokens[i + 1] == "of"
    raise AssertionError(f"no {key}= in\n{stdout}")


def check_fetches(stdout: str, keys: tuple[str, ...]) -> None:
    bad = [k for k in keys if not all_good(stdout, k)]
    assert not bad, f"{bad} differ from the reference:\n{stdout}"


@pytest.mark.parametrize("priority", ["best-effort", "high"])
def test_every_form_fetches_what_the_programming_guide_defines(program, emulator_server, priority):
    job = run_job(emulator_server.socket, program, priority=priority, timeout=300)
    assert job.returncode == 0 and job.value("done") == "1", job.stdout + job.stderr
    check_fetches(job.stdout, EVERY_FETCH + ARRAY_FORMS)
    assert job.value("resource_desc") == "1,64" and job.value("texture_desc") == "1,0"
    assert job.value("outside") == "0,0"                    # surface reads outside in zero mode
    assert job.value("destroy_twice") == str(INVALID_VALUE)
    # linear filtering of integers (cudart refuses it itself), sRGB, a surface over an
    # array made without surface load/store
    assert job.value("refused") == f"{INVALID_FILTER_SETTING},{NOT_SUPPORTED},{INVALID_VALUE}"
    assert "sRGB textures (CU_TRSF_SRGB) are not supported by tally" in job.stderr
    assert "CUDA_ARRAY3D_SURFACE_LDST" in job.stderr
    # host memory the job never registered is no resource
    assert job.value("foreign_memory") == str(INVALID_VALUE)
    assert "is not memory this client owns" in job.stderr


def test_objects_go_with_the_job_and_a_bad_handle_faults_only_its_job(program, emulator_server):
    bad = run_job(emulator_server.socket, program, "bad_handle")
    assert bad.value("bad_handle") == "cudaErrorIllegalAddress", bad.stdout + bad.stderr
    assert "tex.1d.v4.f32.s32" in bad.stderr           # the fault names the instruction
    again = run_job(emulator_server.socket, program, "flat", timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    check_fetches(again.stdout, EVERY_FETCH)
    assert again.value("array_forms") == "0,0" and again.value("narrow_rows") == "0"   # all made here
    status = emulator_server.status()
    assert all(c["device_bytes"] == 0 for c in status.get("clients", []))


@pytest.mark.parametrize("mode", ["slice", "ptb"])
def test_best_effort_variants_sample_as_the_kernels_do_whole(nvcc, tmp_path, program, mode):
    run = best_effort_beside_inference(nvcc, tmp_path, mode, program)
    check_fetches(run.best_effort, EVERY_FETCH + ARRAY_FORMS)
    kind = "kernels_sliced" if mode == "slice" else "kernels_ptb"
    assert run.scheduler[kind] > 0, run.scheduler


def test_a_suspended_job_samples_its_texture_after_resume(program, emulator_server):
    """Suspend frees the job's memory and brings it back at the same addresses, so the
    descriptor (the server's, not the job's memory) still names the right texels."""
    job = start_job(emulator_server.socket, program, "hold")
    assert job.stdout.readline().strip() == "held=1"
    [client] = [c for c in emulator_server.status()["clients"] if "textures" in c["program"]]
    cid = str(client["client_id"])
    for command in ("suspend", "resume"):
        r = tally_server(emulator_server, command, "--client", cid)
        assert r.returncode == 0, r.stdout + r.stderr
    tell(job, "sample")
    held = finish(job)
    assert held.returncode == 0 and held.value("held_good") == "68", held.stdout + held.stderr
