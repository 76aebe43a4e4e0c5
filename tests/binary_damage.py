"""Hypothesis helper shared by the binary readers' fuzz tests (fatbin, cubin)."""
from __future__ import annotations


def damaged_copy(data, blob: bytes, hot: list[int], span: int) -> bytes:
    """`blob` with 1-4 bytes overwritten (anywhere, or within `span` bytes after
    one of the `hot` offsets: headers and size fields), then maybe truncated."""
    import hypothesis.strategies as st

    damaged = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.one_of(
            st.integers(0, len(blob) - 1),
            st.sampled_from(hot).flatmap(lambda h: st.integers(h, min(h + span, len(blob) - 1))),
        ))
        damaged[where] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        damaged = damaged[:data.draw(st.integers(0, len(damaged)))]
    return bytes(damaged)
