"""The job_submit/lua hook's Python side: its config file and the checks ``compass doctor`` runs.

The hook itself is ``etc/slurm/job_submit.lua``, run by slurmctld. It reads its
settings from ``hook_config`` (default /run/compass/hook.conf), which ``compass
daemon`` writes at start from its own config, or the admin writes by hand
(``hook_config = ""`` keeps the daemon off it)::

    anchors = /run/compass/anchors
    staleness = 15
    lease = 60
    interactive = managed
    interactive_lease = 10
    marker = compass
    partitions =

``key = value`` lines, ``#`` comments, values optionally in double quotes. The
grammar here is the hook's (``parse_config`` in the Lua file): a file this module
rejects, the hook rejects too, and then changes no job. ``problems()`` says what
would make the hook leave GPU jobs to Slurm right now.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..atomic import write_atomic
from ..config import Config
from ..slurm.state import MARKER

#: setting -> kind, as the hook reads them
SETTINGS = {"anchors": "path", "staleness": "seconds", "lease": "seconds", "interactive": "choice",
            "interactive_lease": "seconds", "marker": "token", "partitions": "list"}
REQUIRED = ("anchors", "staleness", "lease", "marker")
INTERACTIVE = ("managed", "unmanaged")
#: the hook reads at most this much of either file
READ_LIMIT = 4096
_LINE = re.compile(r"([A-Za-z0-9_]+)\s*=\s*(.*)")
_TOKEN = re.compile(r"[A-Za-z0-9_.-]+")
_SECONDS = re.compile(r"\d+\.?\d*")
_ANCHORS = re.compile(r"# compass-anchors v1 generated=(\d+)[ \n]")
T = TypeVar("T")


class HookConfigError(ValueError):
    """The hook would reject its config file (and so change no job); the message names the line."""


@dataclass(frozen=True)
class HookStatus:
    """What the hook sees now: its settings, and how old the anchors file is."""

    config_path: str
    settings: dict[str, object]
    anchors_age: float


def staleness(config: Config) -> float:
    """Seconds after which the hook takes the daemon as gone: hook_staleness, or three intervals."""
    return config.hook_staleness or 3 * config.interval


def config_text(config: Config) -> str:
    """The hook's config file for this daemon config."""
    return "\n".join([
        "# compass job_submit/lua hook settings: written by `compass daemon` at start (see docs/admin-guide.md)",
        f"anchors = {config.anchors}",
        f"staleness = {staleness(config):g}",
        f"lease = {math.ceil(config.lease)}",
        f"interactive = {config.interactive}",
        f"interactive_lease = {math.ceil(config.interactive_lease)}",
        f"marker = {MARKER}",
        f"partitions = {','.join(config.partitions)}",
    ]) + "\n"


def write_config(config: Config) -> Path:
    """Write the hook's config to ``config.hook_config`` (atomically: the hook never reads half a file)."""
    path = Path(config.hook_config)
    write_atomic(path, config_text(config))
    return path


def parse_config(text: str) -> dict[str, object]:
    """The hook's settings in ``text``, read as the hook reads them; HookConfigError when it would not."""
    settings: dict[str, object] = {"partitions": ()}
    for number, line in enumerate(text.split("\n"), start=1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        match = _LINE.fullmatch(body)
        if match is None:
            raise HookConfigError(f"line {number}: not `key = value`: {body}")
        key, value = match.group(1), match.group(2)
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        kind = SETTINGS.get(key)
        if kind is None:
            raise HookConfigError(f"line {number}: unknown setting {key}")
        if kind == "seconds":
            if not _SECONDS.fullmatch(value):
                raise HookConfigError(f"line {number}: {key} must be a number of seconds, got {value}")
            settings[key] = float(value)
        elif kind == "choice":
            if value not in INTERACTIVE:
                raise HookConfigError(f"line {number}: {key} must be managed or unmanaged, got {value}")
            settings[key] = value
        elif kind == "list":
            settings[key] = tuple(p for p in re.split(r"[,\s]+", value) if p)
        else:
            if not value or (kind == "token" and not _TOKEN.fullmatch(value)):
                raise HookConfigError(f"line {number}: {key} has no usable value: {value}")
            settings[key] = value
    for key in REQUIRED:
        if key not in settings:
            raise HookConfigError(f"missing setting {key}")
    return settings


def anchors_generated(text: str) -> int:
    """The anchors file's generated= time; HookConfigError when it is not a compass-anchors v1 file."""
    match = _ANCHORS.match(text)
    if match is None:
        raise HookConfigError("not a compass-anchors v1 file")
    return int(match.group(1))


def status(config_path: str, clock: Callable[[], float] = time.time) -> HookStatus:
    """What the hook would see now; HookConfigError says why it would leave GPU jobs to Slurm."""
    settings = _checked(config_path, parse_config, _head(config_path, READ_LIMIT, config_path))
    if settings["marker"] != MARKER:
        raise HookConfigError(f"{config_path}: marker = {settings['marker']}, but the daemon manages jobs "
                              f"marked {MARKER}")
    anchors = f"anchors file {settings['anchors']}"
    head = _head(str(settings["anchors"]), 256, f"{anchors} unreadable")
    generated = _checked(f"{anchors}:", anchors_generated, head)
    age = clock() - generated
    if abs(age) > float(settings["staleness"]):  # type: ignore[arg-type]
        raise HookConfigError(f"{anchors} generated {age:.0f} s ago, staleness {settings['staleness']:g} s: "
                              "the daemon looks gone")
    return HookStatus(config_path, settings, age)


def _head(path: str, limit: int, what: str) -> str:
    """The first ``limit`` characters of ``path`` (as much as the hook reads)."""
    try:
        with open(path, errors="replace") as file:
            return file.read(limit)
    except OSError as err:
        raise HookConfigError(f"{what}: {err.strerror or err}") from None


def _checked(what: str, read: Callable[[str], T], text: str) -> T:
    try:
        return read(text)
    except HookConfigError as err:
        raise HookConfigError(f"{what} {err}") from None
