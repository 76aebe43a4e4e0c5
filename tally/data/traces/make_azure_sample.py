"""Generate azure_functions_2021_sample.csv, the bundled arrival trace.

This is a synthetic trace *shaped like* one busy function of the Azure Functions
2021 invocation trace (per-minute invocation counts over a day: a diurnal swing,
long calm stretches, sudden bursts of several times the typical rate lasting a
few minutes, and minute-to-minute noise). It is not the real data, which is
not redistributed here. Deterministic: the same seed writes the same file.

    python tally/data/traces/make_azure_sample.py   # rewrites the CSV beside this file
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

SEED = 2021
MINUTES = 1440
MEAN_PER_MINUTE = 600.0
BURST_ENTER = 1 / 45       # per-minute chance a calm stretch turns into a burst
BURST_LEAVE = 1 / 4        # per-minute chance a burst ends (mean 4 minutes)


def generate(seed: int = SEED) -> np.ndarray:
    rng = np.random.default_rng(seed)
    minutes = np.arange(MINUTES)
    diurnal = 1.0 + 0.45 * np.sin(2 * np.pi * (minutes - 360) / MINUTES)
    level = np.empty(MINUTES)
    bursting, factor = False, 1.0
    for m in range(MINUTES):
        if bursting and rng.random() < BURST_LEAVE:
            bursting = False
        elif not bursting and rng.random() < BURST_ENTER:
            bursting, factor = True, float(rng.lognormal(np.log(3.0), 0.4))
        level[m] = factor if bursting else 1.0
    noise = rng.lognormal(0.0, 0.25, MINUTES)
    rate = MEAN_PER_MINUTE * diurnal * level * noise
    return rng.poisson(rate)


def main() -> None:
    counts = generate()
    out = Path(__file__).with_name("azure_functions_2021_sample.csv")
    header = ("synthetic per-minute invocation counts shaped like the Azure Functions 2021 trace;\n"
              f"written by make_azure_sample.py (seed {SEED}); not the real data\nminute,invocations")
    np.savetxt(out, np.column_stack([np.arange(MINUTES), counts]), fmt="%d", delimiter=",",
               header=header, comments="# ")


if __name__ == "__main__":
    main()
