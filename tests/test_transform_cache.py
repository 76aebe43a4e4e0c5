"""The content-addressed transform cache: a second build of the same PTX is a
hit that runs no pass; anything in the key changing is a miss; damaged
entries are ignored and rebuilt; writes are atomic; an unwritable cache
costs only a warning."""
from __future__ import annotations

import json
import logging

import pytest

from ptx_corpus import CORPUS_DIR, compile_ptx

import ptx_passes.variants as variants
from ptx_passes import cache as cache_module
from ptx_passes.cache import TransformCache, cache_key, default_directory
from ptx_passes.pipeline import PASS_VERSIONS, applied_passes
from ptx_passes.variants import VARIANT_PASSES, build_variants


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_ptx(CORPUS_DIR / "early_return.cu", "sm_80")


def _key(ptx: str) -> str:
    return cache_key(ptx, applied_passes(VARIANT_PASSES))


def _entries(directory) -> list:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def test_second_build_is_a_hit_that_runs_no_pass(ptx, tmp_path, monkeypatch):
    first = build_variants(ptx, cache_dir=tmp_path)
    assert not first.from_cache
    assert _entries(tmp_path) == [TransformCache(tmp_path).path(_key(ptx))]

    def no_transform(*_args, **_kwargs):
        raise AssertionError("a cache hit must not run the passes")

    monkeypatch.setattr(variants, "transform_module", no_transform)
    second = build_variants(ptx, cache_dir=tmp_path)
    assert second.from_cache
    assert second.ptx == first.ptx and second.kernels == first.kernels


def test_key_depends_on_input_passes_and_tool(ptx, monkeypatch):
    base = _key(ptx)
    assert _key(ptx + "\n") != base
    assert cache_key(ptx, applied_passes(("slicing",))) != base
    monkeypatch.setitem(PASS_VERSIONS, "ptb", PASS_VERSIONS["ptb"] + 1)
    assert _key(ptx) != base
    monkeypatch.undo()
    assert _key(ptx) == base
    monkeypatch.setattr(cache_module, "tool_version", lambda: "other-tool")
    assert _key(ptx) != base


def test_changed_pass_version_rebuilds(ptx, tmp_path, monkeypatch):
    build_variants(ptx, cache_dir=tmp_path)
    monkeypatch.setitem(PASS_VERSIONS, "slicing", PASS_VERSIONS["slicing"] + 1)
    again = build_variants(ptx, cache_dir=tmp_path)
    assert not again.from_cache
    assert len(_entries(tmp_path)) == 2


def _damage_truncate(path):
    path.write_bytes(path.read_bytes()[:-10])


def _damage_flip_body_byte(path):
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(bytes(data))


def _damage_garbage(path):
    path.write_bytes(b"\x00\xff garbage")


def _damage_empty(path):
    path.write_bytes(b"")


def _damage_bad_report(path):
    header, body = path.read_bytes().split(b"\n", 1)
    fields = json.loads(header)
    fields["report"] = {"kernels": {"k": {"sliced": {"bogus": 1}}}}
    path.write_bytes(json.dumps(fields).encode() + b"\n" + body)


def _damage_other_key(path):
    header, body = path.read_bytes().split(b"\n", 1)
    fields = json.loads(header)
    fields["key"] = "0" * 64
    path.write_bytes(json.dumps(fields).encode() + b"\n" + body)


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_flip_body_byte, _damage_garbage,
                                    _damage_empty, _damage_bad_report, _damage_other_key],
                         ids=lambda f: f.__name__[len("_damage_"):])
def test_damaged_entry_is_ignored_and_rebuilt(ptx, tmp_path, damage, caplog):
    good = build_variants(ptx, cache_dir=tmp_path)
    path = TransformCache(tmp_path).path(_key(ptx))
    intact = path.read_bytes()
    damage(path)
    with caplog.at_level(logging.WARNING, logger="ptx_passes.cache"):
        rebuilt = build_variants(ptx, cache_dir=tmp_path)
    assert not rebuilt.from_cache
    assert rebuilt.ptx == good.ptx and rebuilt.kernels == good.kernels
    assert path.read_bytes() == intact
    assert build_variants(ptx, cache_dir=tmp_path).from_cache
    if damage is not _damage_bad_report:   # that one is well-formed at the cache level
        assert "damaged PTX cache entry" in caplog.text


def test_store_leaves_no_temporary_files(ptx, tmp_path):
    cache = TransformCache(tmp_path)
    for i in range(3):
        cache.store(f"{i:064x}", ptx, {"kernels": {}})
    assert [p.name for p in _entries(tmp_path)] == [f"{i:064x}.ptxv" for i in range(3)]
    assert cache.load(f"{1:064x}").ptx == ptx


def test_unwritable_cache_only_warns(ptx, tmp_path, caplog):
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("a file where the cache directory should be")
    with caplog.at_level(logging.WARNING, logger="ptx_passes.cache"):
        result = build_variants(ptx, cache_dir=blocker / "ptx")
    assert not result.from_cache and "early_exit_neighbors__tally_ptb" in result.ptx
    assert "cannot write PTX cache entry" in caplog.text and "TALLY_CACHE_DIR" in caplog.text


def test_disabled_cache_writes_nothing(ptx, tmp_path, monkeypatch):
    monkeypatch.setenv("TALLY_CACHE_DIR", str(tmp_path))
    build_variants(ptx, use_cache=False)
    assert _entries(tmp_path) == []
    build_variants(ptx)
    assert len(_entries(tmp_path)) == 1


def test_default_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TALLY_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_directory() == tmp_path / "explicit"
    monkeypatch.delenv("TALLY_CACHE_DIR")
    assert default_directory() == tmp_path / "xdg" / "tally" / "ptx"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_directory() == tmp_path / "home" / ".cache" / "tally" / "ptx"
