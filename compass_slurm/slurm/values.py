"""How Slurm spells node states, features, memory sizes and holds, shared by the JSON and text parsers."""

from __future__ import annotations

import functools
import re

from . import names
from .errors import SlurmNameError, SlurmParseError

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
#: pending reasons of a held job (``job_requeued_in_held_state``: requeue-held, still completing or pending again)
_HELD = {"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"}
#: [days-]hours:minutes:seconds, or fewer parts (minutes:seconds, minutes), as scontrol prints durations
_DURATION = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
#: minutes at or above this are Slurm's INFINITE / NO_VAL markers, not time limits
_NO_MINUTES = 0xFFFFFFFE
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


def duration_s(text: str, what: str) -> int | None:
    """scontrol's ``2-03:04:05`` / ``01:30:00`` / ``30:00`` as seconds; None for ``UNLIMITED`` or unset."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    match = _DURATION.fullmatch(text)
    if not match:
        raise SlurmParseError(f"{what}: not a duration: {text[:40]!r}")
    days, *parts = match.groups()
    parts = [int(p) for p in parts if p is not None]
    if "-" in text:  # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
    elif len(parts) < 3:  # minutes[:seconds]
        parts = [0, *parts, *([0] * (2 - len(parts)))]
    hours, minutes, seconds = parts
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def time_limit_s(minutes: int | None) -> int | None:
    """squeue --json's ``time_limit`` (minutes; null or a marker for unlimited) as seconds."""
    if minutes is None or minutes >= _NO_MINUTES or minutes < 0:
        return None
    return minutes * 60


@functools.lru_cache(maxsize=256)
def features(text: str) -> frozenset[str]:
    """A node's features, ``a100,80gb`` (scontrol, sinfo --json and pyslurm alike). The same object for the same
    text: a site has a few, and the translation cache compares every node's each read (identity first)."""
    return frozenset(name for name in text.split(",") if name)


def switches(text: str, what: str) -> int:
    """``--switches``'s count from scontrol's ``Switches=2@00:05:00`` (the wait after the @); 0 when unset."""
    count = text.partition("@")[0]
    if text and not count.isdecimal():
        raise SlurmParseError(f"{what}: field Switches is not a count: {text[:40]!r}")
    return int(count) if count else 0


def sluid(text: object, what: str) -> str:
    """A job record's SLUID as read (25.11 on), checked as a command line will take it; "" for none."""
    if not text:
        return ""
    try:
        return names.sluid(text)
    except SlurmNameError as err:
        raise SlurmParseError(f"{what}: {err}") from None
