"""Slurm hostlists: ``node[01-16,20]`` <-> ``["node01", ..., "node16", "node20"]``.

Handles several bracket groups in one name (``r[1-2]n[01-02]``), text after a
bracket (``a[1-3]b``), zero padding (kept from the range's first bound) and
comma-separated mixes (``a1,b[2-3],c``). Malformed input raises HostlistError
naming the offending part.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .errors import SlurmParseError

#: refuse to expand absurd ranges: a typo like node[1-99999999] must not eat the memory
MAX_HOSTS = 1_000_000

_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_STEPPED_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")
_NAME_CHARS = re.compile(r"[^\s\[\],]*")


class HostlistError(SlurmParseError):
    """A hostlist that is not valid Slurm syntax."""


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"hostlist {text!r}: nested '[' at position {i}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"hostlist {text!r}: ']' without '[' at position {i}")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"hostlist {text!r}: '[' is never closed")
    parts.append(text[start:])
    return parts


def _expand_ranges(body: str, whole: str) -> list[str]:
    """``01-03,7`` -> ["01", "02", "03", "7"]."""
    out: list[str] = []
    for item in body.split(","):
        match = _RANGE.fullmatch(item)
        if not match:
            raise HostlistError(f"hostlist {whole!r}: bad range {item!r} in [{body}]")
        first, last = match.group(1), match.group(2) or match.group(1)
        lo, hi = int(first), int(last)
        if hi < lo:
            raise HostlistError(f"hostlist {whole!r}: range {item!r} runs backwards")
        if len(out) + hi - lo + 1 > MAX_HOSTS:
            raise HostlistError(f"hostlist {whole!r}: [{body}] has more than {MAX_HOSTS} hosts")
        width = len(first) if first.startswith("0") or len(first) == len(last) else 0
        out.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
    return out


def expand_ranges(text: str) -> list[int]:
    """Numbers in Slurm's range syntax, as array task lists write them: ``0-5``, ``1,3,7-9``, ``0-15:4``."""
    out: list[int] = []
    for item in text.split(","):
        match = _STEPPED_RANGE.fullmatch(item.strip())
        if not match:
            raise HostlistError(f"ranges {text!r}: bad range {item!r}")
        lo = int(match.group(1))
        hi = int(match.group(2) or lo)
        step = int(match.group(3) or 1)
        if hi < lo or step < 1:
            raise HostlistError(f"ranges {text!r}: range {item!r} runs backwards or has no step")
        if len(out) + (hi - lo) // step + 1 > MAX_HOSTS:
            raise HostlistError(f"ranges {text!r}: more than {MAX_HOSTS} numbers")
        out.extend(range(lo, hi + 1, step))
    return out


def _expand_one(pattern: str, whole: str) -> list[str]:
    names = [""]
    pos = 0
    while pos < len(pattern):
        if pattern[pos] == "[":
            end = pattern.index("]", pos)
            ranges = _expand_ranges(pattern[pos + 1 : end], whole)
            if len(names) * len(ranges) > MAX_HOSTS:  # check before building the product
                raise HostlistError(f"hostlist {whole!r}: more than {MAX_HOSTS} hosts")
            names = [n + r for n in names for r in ranges]
            pos = end + 1
        else:
            literal = _NAME_CHARS.match(pattern, pos).group(0)
            if not literal:
                raise HostlistError(f"hostlist {whole!r}: unexpected {pattern[pos]!r} in {pattern!r}")
            names = [n + literal for n in names]
            pos += len(literal)
    return names


def expand(text: str) -> list[str]:
    """All host names of a hostlist, in order; ``""`` and ``(null)`` are empty."""
    text = text.strip()
    if text in ("", "(null)"):
        return []
    names: list[str] = []
    for part in _split_top(text):
        if not part:
            raise HostlistError(f"hostlist {text!r}: empty name between commas")
        names.extend(_expand_one(part, text))
        if len(names) > MAX_HOSTS:
            raise HostlistError(f"hostlist {text!r}: more than {MAX_HOSTS} hosts")
    return names


_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def compress(names: Iterable[str]) -> str:
    """A compact hostlist for ``names`` (sorted, duplicates dropped): node01,node02,node05 -> node[01-02,05]."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in sorted(set(names)):
        match = _TRAILING_NUMBER.match(name)
        if match:
            groups.setdefault((match.group(1), len(match.group(2))), []).append(int(match.group(2)))
        else:
            plain.append(name)
    parts = list(plain)
    for (prefix, width), numbers in groups.items():
        numbers.sort()
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        runs: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(sorted(parts))
