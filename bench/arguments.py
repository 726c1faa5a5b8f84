"""Command-line values the benchmarks share: sizes that must be positive, and ``--quick`` sizes that
apply only where no size was given."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping


def at_least_one(text: str) -> int:
    """An ``argparse`` type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def above_zero(text: str) -> float:
    """An ``argparse`` type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text} is not a number above 0")
    return value


def sizes(args: argparse.Namespace, full: Mapping[str, object], quick: Mapping[str, object]) -> None:
    """Fill each size not given (None) with its ``--quick`` value under ``--quick``, else its full one: an
    explicit size wins over ``--quick``."""
    for name, value in full.items():
        if getattr(args, name) is None:
            setattr(args, name, quick[name] if args.quick else value)
