"""How Slurm spells node states, memory sizes and holds, shared by the JSON and text parsers."""

from __future__ import annotations

import re

from .errors import SlurmParseError

#: sinfo's one-character suffixes for node flags
_SUFFIX_FLAGS = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "%": "POWERING_DOWN",
                 "!": "POWER_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
                 "-": "PLANNED"}
_BASE_STATES = {"idle", "mixed", "allocated", "down", "error", "future", "unknown", "completing", "fail", "inval"}
#: sinfo's summary words that mean a base state plus a flag
_COMPOUND = {"drained": ("idle", "DRAIN"), "draining": ("mixed", "DRAIN"), "drain": ("idle", "DRAIN"),
             "maint": ("idle", "MAINTENANCE"), "reserved": ("idle", "RESERVED"), "resv": ("idle", "RESERVED"),
             "planned": ("idle", "PLANNED"), "alloc": ("allocated", None), "comp": ("completing", None),
             "drng": ("mixed", "DRAIN")}
_HELD = {"JobHeldUser", "JobHeldAdmin"}
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)([KMGTP]?)B?", re.IGNORECASE)
_MB_PER = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def node_state(words: list[str], node: str) -> tuple[str, frozenset[str]]:
    """(base state, flags) from Slurm's words, e.g. ["MIXED", "DRAIN"], ["MIXED+DRAIN"] or ["idle*"]."""
    base: str | None = None
    flags: set[str] = set()
    for word in "+".join(words).split("+"):  # 23.02+ JSON joins a state list into one word: "MIXED+DRAIN"
        word = word.strip()
        while word and word[-1] in _SUFFIX_FLAGS:
            flags.add(_SUFFIX_FLAGS[word[-1]])
            word = word[:-1]
        low = word.lower()
        if low in _BASE_STATES and base is None:
            base = low
        elif low in _COMPOUND and base is None:
            base, flag = _COMPOUND[low]
            if flag:
                flags.add(flag)
        elif word:
            flags.add(word.upper())
    if base is None:
        raise SlurmParseError(f"node {node}: no base state in {'+'.join(words)!r}")
    return base, frozenset(flags)


def memory_mb(text: str, what: str) -> int:
    """``8000M``/``250G``/``8000`` (MB) -> MB."""
    match = _MEMORY.fullmatch(text.strip())
    if not match:
        raise SlurmParseError(f"{what}: not a memory size: {text!r}")
    size = float(match.group(1)) * _MB_PER[match.group(2).upper()]
    if size == float("inf"):  # hundreds of digits: past float's range
        raise SlurmParseError(f"{what}: memory size out of range: {text[:40]!r}")
    return int(size)


def held(reason: str) -> bool:
    return reason in _HELD
