"""What the results' summarize.py scripts share: a median with its range, a task's command line. Standard library only."""

from __future__ import annotations

import shlex
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def spread(values: list[float], fmt: str) -> str:
    """ "median [min-max]", or the one value when all agree."""
    lo, mid, hi = min(values), statistics.median(values), max(values)
    if fmt.format(lo) == fmt.format(hi):
        return fmt.format(mid)
    return f"{fmt.format(mid)} [{fmt.format(lo)}-{fmt.format(hi)}]"


def command(argv: list[str], varied: str = "--seed") -> str:
    """The task's command line as run from the repository, the value of ``varied`` left to S."""
    out = ["compass", "simulate"]
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--json":
            continue
        if arg == varied:
            out += [varied, "S"]
            skip = True
            continue
        path = Path(arg)
        if path.is_absolute() and path.exists():
            try:
                arg = str(path.relative_to(REPO))
            except ValueError:
                arg = str(Path("..") / path.relative_to(REPO.parent))
        out.append(arg)
    return shlex.join(out).replace("'S'", "S")
