"""Backends say what they are in one traits record, and are made by name from one
registry: the server reads the record, never the backend's name."""
from __future__ import annotations

from pathlib import Path

import pytest

from tally.backends.base import BackendTraits
from tally.backends.cuda import CudaBackend
from tally.backends.emulator import EmulatorBackend
from tally.backends.null import NullBackend
from tally.backends.ptx_variants import PtxVariantProvider
from tally.backends.registry import (CHOICES, BackendOptionsRefused, BackendUnavailable, make_backend,
                                     real_driver_present, resolve_backend)
from tally.backends.sim import SimBackend
from tally.backends.sim.variants import SimVariantProvider
from tally.server.server import make_variant_provider
from tally.server.server_config import ServerConfig

BACKEND_CLASSES = {"cuda": CudaBackend, "emulator": EmulatorBackend, "null": NullBackend, "sim": SimBackend}


@pytest.mark.parametrize("name", sorted(BACKEND_CLASSES))
def test_every_backend_class_sets_its_own_traits(name):
    cls = BACKEND_CLASSES[name]
    assert cls.kind == name
    assert isinstance(cls.traits, BackendTraits)
    assert "traits" in vars(cls)             # set by the class itself, not inherited


def test_the_traits_say_what_the_server_asked_the_names_before():
    assert CudaBackend.traits.errors_are_context_wide
    assert not any(BACKEND_CLASSES[n].traits.errors_are_context_wide for n in ("emulator", "null", "sim"))
    assert [n for n, c in BACKEND_CLASSES.items() if not c.traits.runs_cubins] == ["emulator"]
    assert [n for n, c in BACKEND_CLASSES.items() if c.traits.printf_per_stream] == ["emulator"]
    assert [n for n, c in BACKEND_CLASSES.items() if not c.traits.executes_work] == ["null"]
    assert [n for n, c in BACKEND_CLASSES.items() if c.traits.virtual_clock] == ["sim"]
    assert [n for n, c in BACKEND_CLASSES.items() if not c.traits.variants_from_ptx] == ["sim"]
    with pytest.raises(AttributeError):
        CudaBackend.traits.runs_cubins = False  # frozen


def test_session_spin_budget_comes_from_the_traits_unless_configured():
    config = ServerConfig(socket_path=Path("unused"))
    assert config.session_spin_us(CudaBackend.traits) == 1000.0
    assert [config.session_spin_us(BACKEND_CLASSES[n].traits) for n in ("emulator", "null", "sim")] == [20.0] * 3
    assert ServerConfig(socket_path=Path("unused"), spin_us=5.0).session_spin_us(CudaBackend.traits) == 5.0


def test_high_priority_sessions_may_spin_longer():
    config = ServerConfig(socket_path=Path("unused"), spin_us=5.0, hp_spin_us=float("inf"))
    assert config.session_spin_us(NullBackend.traits, high_priority=True) == float("inf")
    assert config.session_spin_us(NullBackend.traits, high_priority=False) == 5.0
    assert ServerConfig(socket_path=Path("unused")).session_spin_us(NullBackend.traits, high_priority=True) == 20.0


def test_variant_provider_and_clock_match_the_traits():
    sim = SimBackend()
    try:
        provider, clock = make_variant_provider(sim)
        assert isinstance(provider, SimVariantProvider) and clock is sim.clock
    finally:
        sim.close()
    for backend in (NullBackend(), EmulatorBackend(printf_to_stdout=False)):
        provider, clock = make_variant_provider(backend)
        assert isinstance(provider, PtxVariantProvider) and clock is None
        assert provider is not backend.variant_provider()    # a fresh one each time (providers cache)
        backend.close()


def test_registry_makes_each_backend_by_name():
    assert CHOICES == ("auto", "cuda", "emulator", "null", "sim")
    null = make_backend("null")
    assert isinstance(null, NullBackend)
    sim = make_backend("sim")
    try:
        assert isinstance(sim, SimBackend)
    finally:
        sim.close()
    emulator = make_backend("emulator", compute_capability=(12, 0), driver_version=13020)
    try:
        assert isinstance(emulator, EmulatorBackend)
        d = emulator.describe()
        assert (d.compute_capability, d.driver_version) == ((12, 0), 13020)
    finally:
        emulator.close()


def test_auto_means_cuda_with_a_gpu_else_the_emulator():
    assert resolve_backend("auto") == ("cuda" if real_driver_present() else "emulator")
    assert resolve_backend("sim") == "sim"


def test_unknown_backend_names_the_choices():
    with pytest.raises(BackendUnavailable, match=r"unknown backend 'gpu'; choose one of auto, cuda, emulator, null, sim"):
        make_backend("gpu")


@pytest.mark.parametrize("name", ["null", "sim", "cuda"])
def test_options_a_backend_does_not_take_are_refused_before_it_is_made(name):
    with pytest.raises(BackendOptionsRefused, match=f"the {name} backend takes no option.s. compute_capability") as e:
        make_backend(name, compute_capability=(12, 0))
    assert e.value.backend == name and e.value.options == ["compute_capability"]


@pytest.mark.skipif(real_driver_present(), reason="a GPU is present")
def test_cuda_without_a_driver_says_what_to_use_instead():
    with pytest.raises(BackendUnavailable, match="no NVIDIA driver or GPU found.*use --backend emulator"):
        make_backend("cuda")
