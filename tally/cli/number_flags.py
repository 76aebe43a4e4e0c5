"""Numeric command-line values checked against their range, one way for every flag."""
from __future__ import annotations

import argparse
from typing import Callable


def number_flag(text: str, in_range: Callable[[float], bool], problem: str) -> float:
    """`text` as a float when `in_range` accepts it; otherwise argparse's error with
    `problem` (the sentence saying what the flag takes). Not a number is out of range."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not in_range(value):
        raise argparse.ArgumentTypeError(problem)
    return value
