"""sbatch's option table (every long name, its short letter, whether it takes a value): the installed sbatch's.

Releases add options (23.11 ``--tres-per-task``, 24.11 ``--segment``, 25.11
``--spread-segments``...) and change some (25.11's ``--requeue[=expedited]``), so
the wrapper uses the table of the sbatch it will exec, which option_reader reads
from it, instead of trusting its own. The table read is cached per binary (path,
size, mtime; read again after a day, since a site's ``sbatch`` may be a script
that execs another) in $XDG_CACHE_HOME/compass/ (default ~/.cache/compass/);
without a writable cache it is read every time. When sbatch cannot be read (no
slurm.conf, no such binary) the built-in table, 22.05's, is the table.

This module is the wrapper's start-up path (a cache hit: a stat and a small JSON
file); option_reader is imported on a miss only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

REQUIRED, NONE, OPTIONAL = "required", "none", "optional"

_BUILTIN_LONG: dict[str, str] = {
    **dict.fromkeys(
        "account acctg-freq array batch bb bbf begin chdir cluster cluster-constraint clusters comment constraint "
        "container context core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot "
        "dependency distribution error exclude export export-file extra-node-info gid gpu-bind gpu-freq gpus "
        "gpus-per-node gpus-per-socket gpus-per-task gres gres-flags hint input job-name kill-on-invalid-dep "
        "licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus network nodefile "
        "nodelist nodes ntasks ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket ntasks-per-tres "
        "open-mode output partition power prefer priority profile qos reservation signal sockets-per-node "
        "switches tasks-per-node thread-spec threads-per-core time time-min tmp uid wait-all-nodes wckey wrap"
        .split(), REQUIRED),
    **dict.fromkeys(
        "contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot requeue "
        "spread-job test-only usage use-min-nodes verbose version wait".split(), NONE),
    **dict.fromkeys("exclusive get-user-env nice no-kill propagate".split(), OPTIONAL),
}

#: short option -> the long option it stands for (the same letters in every release, 22.05 to 26.05)
_BUILTIN_SHORT: dict[str, str] = {
    "a": "array", "A": "account", "b": "begin", "B": "extra-node-info", "c": "cpus-per-task", "C": "constraint",
    "d": "dependency", "D": "chdir", "e": "error", "F": "nodefile", "G": "gpus", "h": "help", "H": "hold",
    "i": "input", "J": "job-name", "k": "no-kill", "L": "licenses", "m": "distribution", "M": "clusters",
    "n": "ntasks", "N": "nodes", "o": "output", "O": "overcommit", "p": "partition", "q": "qos", "Q": "quiet",
    "s": "oversubscribe", "S": "core-spec", "t": "time", "v": "verbose", "V": "version", "w": "nodelist",
    "W": "wait", "x": "exclude",
}

#: how long a read table is trusted, whatever the binary's stat says
MAX_AGE = 86400.0
CACHE_NAME = "sbatch-options.json"
_FORMAT = 1


@dataclass(frozen=True)
class OptionTable:
    """sbatch's options: long name -> REQUIRED, NONE or OPTIONAL; short letter -> long name."""

    long: Mapping[str, str]
    short: Mapping[str, str]
    #: what ``sbatch --version`` printed (None: the built-in table)
    version: str | None = None


BUILTIN = OptionTable(_BUILTIN_LONG, _BUILTIN_SHORT)


def resolve(binary: str, path: str | None) -> str | None:
    """The real path of the file exec would run for ``binary`` (searched on ``path`` unless it names a
    directory), or None."""
    if os.sep in binary:
        return os.path.realpath(binary) if os.access(binary, os.X_OK) else None
    for directory in (path if path is not None else os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", binary)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    return None


def cache_file(environ: Mapping[str, str]) -> str:
    """Where the tables are cached (paths as strings: pathlib would add a third to the wrapper's imports)."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "compass", CACHE_NAME)


def table_for(binary: str, environ: Mapping[str, str]) -> OptionTable:
    """The option table of the sbatch that ``binary`` runs: from the cache, else read (and cached), else built in."""
    path = resolve(binary, environ.get("PATH"))
    key = stat_key(path) if path is not None else None
    if path is None or key is None:
        return BUILTIN  # exec fails too, and says so
    cache = cache_file(environ)
    table = cached(cache, path, key)
    if table is not None:
        return table
    import fcntl

    from .option_reader import read_table

    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        lock = open(cache.removesuffix(".json") + ".lock", "a")
    except OSError:
        return read_table(path) or BUILTIN  # no cache: read every time
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # many submissions at once: one reads, the others wait for its table
        except OSError:
            pass  # a file system without locks: each of them reads
        table = cached(cache, path, key)
        if table is None:
            table = read_table(path)
            if table is None:
                return BUILTIN  # not cached: sbatch may answer next time (slurm.conf back, slurmctld reachable)
            save(cache, path, key, table)
        return table


def stat_key(path: str) -> dict[str, int] | None:
    """What says the binary is still the one whose table was read (None: no such file)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _load(cache: str) -> Any:
    with open(cache) as file:
        return json.load(file)


def cached(cache: str, path: str, key: dict[str, int]) -> OptionTable | None:
    """The table cached for the binary at ``path`` (its real path) if ``key`` (its stat) still matches."""
    try:
        doc = _load(cache)
        entry = doc["binaries"][path] if doc["format"] == _FORMAT else {}
        if any(entry[field] != value for field, value in key.items()):
            return None
        if not 0 <= time.time() - entry["read_at"] < MAX_AGE:
            return None
        return OptionTable(entry["long"], entry["short"], version=entry["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(cache: str, path: str, key: dict[str, int], table: OptionTable) -> None:
    """Caches ``table`` for the binary at ``path`` as it was when read (``key``), beside the other binaries'."""
    try:
        doc = _load(cache)
        binaries = doc["binaries"] if doc.get("format") == _FORMAT else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        binaries = {}
    if not isinstance(binaries, dict):
        binaries = {}
    binaries[path] = {**key, "read_at": time.time(), "version": table.version, "long": dict(table.long),
                      "short": dict(table.short)}
    temporary = f"{cache}.{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(temporary, "w") as file:
            json.dump({"format": _FORMAT, "binaries": binaries}, file)
        os.replace(temporary, cache)  # readers never see half a file
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
