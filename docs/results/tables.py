"""What the results' summarize.py scripts share: a median with its range, a task's command line. Standard library only."""

from __future__ import annotations

import shlex
import statistics
from pathlib import Path


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
        out.append(shown(arg))
    return shlex.join(out).replace("'S'", "S")


def shown(arg: str) -> str:
    """An absolute path of the machine the sweep ran on, as the repository names it: the project's own files
    from its root (docs/...), the shared traces beside it (../shared/...). By its parts, not by what exists
    here, so that a table regenerates to the byte in any checkout."""
    path = Path(arg)
    if not path.is_absolute():
        return arg
    parts = path.parts
    for k in range(len(parts) - 1):
        if parts[k:k + 2] == ("docs", "results"):
            return str(Path(*parts[k:]))
    if "shared" in parts:
        return str(Path("..", *parts[parts.index("shared"):]))
    return arg
