"""`tally-bench migrate`'s tables, figure and JSON (the measurement: tally/bench/migrate.py).

Three tables: the times against the two host-memcpy baselines of the same run;
the ratios the goal is about (each operation over the baseline it must pay at
least); and where a migration's time goes, step by step, on both servers.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from tally.bench.migrate import Row

SOURCE_STEPS = ("connect", "offer", "hold", "quiesce", "transfer", "commit", "release")
TARGET_STEPS = ("receive", "module", "alloc", "bytes", "commit")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _ms(v: float) -> str:
    return f"{v:.1f} ms"


def times_table(rows: list[Row]) -> str:
    header = ["footprint", "memcpy (new memory)", "memcpy (touched)", "suspend", "suspend again", "resume",
              "resume again", "migrate A->B", "migrate B->A", "job's pause A->B", "job's pause B->A",
              "suspend (wall)", "migrate (wall)", "freed", "server peak RSS", "exact"]
    return _table(header, [[f"{r.footprint_mib} MiB", _ms(r.memcpy_ms), _ms(r.memcpy_warm_ms), _ms(r.suspend_ms),
                            _ms(r.suspend_again_ms), _ms(r.resume_ms), _ms(r.resume_again_ms), _ms(r.migrate_ms),
                            _ms(r.migrate_back_ms), _ms(r.pause_ms), _ms(r.pause_back_ms), _ms(r.suspend_wall_ms),
                            _ms(r.migrate_wall_ms), f"{r.freed_mib:.1f} MiB", f"{r.server_peak_mib:.0f} MiB",
                            "yes" if r.exact else "NO"] for r in rows])


def ratio_table(rows: list[Row]) -> str:
    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b > 0 else "-"

    header = ["footprint", "suspend / memcpy (new)", "suspend again / memcpy (touched)", "resume / memcpy (new)",
              "migrate A->B / memcpy (new)", "job's pause A->B / memcpy (new)"]
    return _table(header, [[f"{r.footprint_mib} MiB", ratio(r.suspend_ms, r.memcpy_ms),
                            ratio(r.suspend_again_ms, r.memcpy_warm_ms), ratio(r.resume_ms, r.memcpy_ms),
                            ratio(r.migrate_ms, r.memcpy_ms), ratio(r.pause_ms, r.memcpy_ms)] for r in rows])


def steps_table(rows: list[Row]) -> str:
    header = ["footprint"] + [f"source: {s}" for s in SOURCE_STEPS] + [f"target: {s}" for s in TARGET_STEPS]
    return _table(header, [[f"{r.footprint_mib} MiB"]
                           + [_ms(r.migrate_steps_ms.get(s, 0.0)) for s in SOURCE_STEPS]
                           + [_ms(r.import_steps_ms.get(s, 0.0)) for s in TARGET_STEPS] for r in rows])


def table(rows: list[Row]) -> str:
    return "\n\n".join((times_table(rows), ratio_table(rows), steps_table(rows)))


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r.footprint_mib for r in rows]
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, values, style in (
            ("suspend", [r.suspend_ms for r in rows], "o-"),
            ("suspend again (kept buffers)", [r.suspend_again_ms for r in rows], "o--"),
            ("resume", [r.resume_ms for r in rows], "s-"),
            ("migrate A->B", [r.migrate_ms for r in rows], "^-"),
            ("job's pause A->B", [r.pause_ms for r in rows], "^--"),
            ("memcpy into new memory (baseline)", [r.memcpy_ms for r in rows], "k:"),
            ("memcpy into touched memory (baseline)", [r.memcpy_warm_ms for r in rows], "k-.")):
        ax.plot(x, values, style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("job's device footprint (MiB)")
    ax.set_ylabel("time (ms, server-side; pause: the job's longest call)")
    ax.set_title("tally: suspend, resume and migration time vs footprint")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(rows: list[Row], json_path: Path | None, png_path: Path | None) -> None:
    if json_path:
        json_path.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    if png_path:
        plot(rows, png_path)
