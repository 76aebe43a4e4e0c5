"""What is remembered from PTX texts is bounded by the bytes of PTX behind it
(ptx_passes/text_memo.py), so a server that parses big linked modules for hours
holds a bounded amount of them."""
from __future__ import annotations

import threading

import pytest

from ptx_passes.text_memo import memo_by_ptx_bytes
from tally.backends import relocated_globals
from tally.server.client import linker


def counting(budget: int):
    calls: list[str] = []

    @memo_by_ptx_bytes(budget)
    def length(ptx: str, label: str = "") -> int:
        calls.append(ptx)
        if ptx.startswith("bad"):
            raise ValueError(ptx)
        return len(ptx)

    return length, calls


def test_the_least_recently_used_texts_go_when_their_bytes_pass_the_budget():
    length, calls = counting(1000)
    a, b, c = "a" * 400, "b" * 400, "c" * 400
    assert [length(a), length(b), length(a)] == [400, 400, 400]
    assert calls == [a, b] and length.held_ptx_bytes() == 800
    length(c)                              # 1200 bytes: b, the least recently used, goes
    assert length.held_ptx_bytes() == 800
    length(a)
    length(b)
    assert calls == [a, b, c, b]


def test_a_text_over_the_whole_budget_is_computed_every_time():
    length, calls = counting(100)
    big = "x" * 101
    length(big)
    length(big)
    assert calls == [big, big] and length.held_ptx_bytes() == 0


def test_failures_are_not_remembered_and_the_other_arguments_are_part_of_the_key():
    length, calls = counting(1000)
    for _ in range(2):
        with pytest.raises(ValueError):
            length("bad ptx")
    length("ptx", "one")
    length("ptx", "two")
    length("ptx", "one")
    assert calls == ["bad ptx", "bad ptx", "ptx", "ptx"]


def test_threads_share_one_bounded_cache():
    length, _ = counting(10_000)
    texts = [chr(ord("a") + i) * 100 for i in range(20)]

    def work():
        for _ in range(50):
            for t in texts:
                assert length(t) == 100

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert length.held_ptx_bytes() == 2000


def test_the_servers_ptx_caches_are_bounded_by_bytes():
    assert relocated_globals.relocate.held_ptx_bytes() <= relocated_globals.RELOCATED_PTX_BYTES
    assert linker._parsed_by_text.held_ptx_bytes() <= linker.PARSED_INPUT_PTX_BYTES
    ptx = "\n".join([".version 8.0", ".target sm_90", ".address_size 64",
                     ".global .align 4 .u32 counter;",
                     ".visible .entry k() { ret; }", ""])
    first = relocated_globals.relocate(ptx)
    assert first is not None and relocated_globals.relocate(ptx) is first
