"""sbatch's option table (every long name, its short letter, whether it takes a value), read from the installed sbatch.

Releases add options (23.11 ``--tres-per-task``, 24.11 ``--segment``, 25.11
``--spread-segments``...) and change some (25.11's ``--requeue[=expedited]``), so
the wrapper reads the table of the sbatch it will exec instead of trusting its
own. None of these reads can submit a job: each ends in ``--help``, ``--usage``
or ``--version``, which sbatch's first pass over its options acts on and exits.

- the names: getopt itself lists every long option when asked for the empty
  prefix (``sbatch --=``: "ambiguous; possibilities: '--account' ...");
- the forms: ``--help`` and ``--usage`` show ``--name=x`` (a value), ``--name[=x]``
  (an optional one) or ``--name``. That text omits options (``--segment``,
  ``--extra``) and misstates some (22.05's ``--wrap[=...]`` needs its value,
  ``--container-id`` is shown bare until 26.05), so it only says which names
  need a closer look: one the built-in table lacks, or shown otherwise;
- a closer look asks getopt: ``sbatch --NAME --version --usage`` prints the usage
  when NAME takes the next word as its value, the version when it does not;
  ``sbatch --NAME=x --version`` then tells an optional value from none.

Names the built-in table and the text agree on keep the built-in (22.05's,
checked against the binary and against Slurm's option table of 22.05 to 26.05).
When sbatch cannot be read (no slurm.conf, no such binary) the built-in table is
the table. The table read is cached per binary (path, size, mtime; re-read after
a day, since a site's ``sbatch`` may be a script that execs another) in
$XDG_CACHE_HOME/compass/ (default ~/.cache/compass/); without a writable cache
it is read every time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

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
#: one read of sbatch (it loads slurm.conf, or fetches it from slurmctld in a configless setup)
READ_TIMEOUT = 10.0
CACHE_NAME = "sbatch-options.json"
_FORMAT = 1

# an option as --help's first column shows it: "  -a, --array=indexes", "  -B  --extra-node-info=S", "      --bb=<spec>"
_HELP_LINE = re.compile(r"^ {1,8}(?:-([A-Za-z]),? +)?--([a-z][a-z0-9-]*)(\[=|=)?", re.MULTILINE)
# and as --usage shows it: "[--nice[=value]]", "[--hold]"
_USAGE_ITEM = re.compile(r"\[--([a-z][a-z0-9-]*)(\[=|=)?")
_POSSIBILITIES = re.compile(r"possibilities:((?: '--[^']+')+)")


@dataclass(frozen=True)
class OptionTable:
    """sbatch's options: long name -> REQUIRED, NONE or OPTIONAL; short letter -> long name."""

    long: Mapping[str, str]
    short: Mapping[str, str]
    #: where the table comes from, for messages
    origin: str = "built in (Slurm 22.05)"
    version: str | None = None


BUILTIN = OptionTable(_BUILTIN_LONG, _BUILTIN_SHORT)


def parse_help(*texts: str) -> tuple[dict[str, str], dict[str, str]]:
    """The forms ``--help`` and ``--usage`` show: name -> REQUIRED (``=x``), OPTIONAL (``[=x]``) or NONE (only
    ever bare), and short letter -> name. The first value form shown wins (``--help``'s, given first, over
    ``--usage``'s); a bare mention never hides one (``--propagate[=rlimits]`` in one, ``[--propagate]`` in the other)."""
    forms: dict[str, str] = {}
    short: dict[str, str] = {}
    for text in texts:
        found = [(m.group(1), m.group(2), m.group(3)) for m in _HELP_LINE.finditer(text)]
        found += [(None, m.group(1), m.group(2)) for m in _USAGE_ITEM.finditer(text)]
        for letter, name, sign in found:
            if forms.get(name, NONE) == NONE:
                forms[name] = {"=": REQUIRED, "[=": OPTIONAL}.get(sign or "", NONE)
            if letter:
                short.setdefault(letter, name)
    return forms, short


def parse_names(text: str) -> list[str] | None:
    """Every long option getopt lists for an ambiguous prefix (``option '--=' is ambiguous; possibilities: ...``)."""
    match = _POSSIBILITIES.search(text)
    return re.findall(r"'--([^']+)'", match.group(1)) if match else None


def read_table(binary: str) -> OptionTable | None:
    """The option table of the sbatch at ``binary``; None when it cannot be read (the built-in table then)."""
    names_run, help_run, usage_run, version_run = _run_all([["--="], ["--help"], ["--usage"], ["--version"]],
                                                           binary)
    if None in (help_run, usage_run, version_run) or version_run[0] != 0 or help_run[0] != 0:
        return None
    forms, letters = parse_help(help_run[1], usage_run[1])
    names = parse_names(names_run[2]) if names_run else None
    if names is None:  # a getopt that does not list them: what we know of, and what the text shows
        names = [*BUILTIN.long, *(name for name in forms if name not in BUILTIN.long)]
    known = {name: BUILTIN.long[name] for name in names
             if name in BUILTIN.long and forms.get(name, BUILTIN.long[name]) == BUILTIN.long[name]}
    probed = probe(binary, [name for name in names if name not in known], version_run[1])
    long = {name: known.get(name) or probed.get(name) for name in names}
    long = {name: arity for name, arity in long.items() if arity is not None}
    short = {letter: name for letter, name in {**BUILTIN.short, **letters}.items() if name in long}
    version = version_run[1].strip()
    return OptionTable(long, short, origin=f"read from {binary} ({version})", version=version)


def probe(binary: str, names: Iterable[str], version: str) -> dict[str, str]:
    """Each name's arity, asked of getopt in sbatch (``version``: what ``sbatch --version`` prints); a name sbatch
    does not know is left out.

    sbatch's first pass hands every option to its setter in turn, so a value that setter refuses ends the run
    early (``--nodes --version``: "Invalid node count"): only getopt's own complaints, in the C locale, say
    what getopt thought.
    """
    names = list(names)
    first = _run_all([[f"--{name}", "--version", "--usage"] for name in names], binary)
    arity: dict[str, str] = {}
    unvalued = []
    for name, run in zip(names, first):
        if run is None or "unrecognized option" in run[2]:
            continue
        if run[0] == 0 and run[1] == version:
            unvalued.append(name)  # "--version" was not its value: none, or an optional one
        else:
            arity[name] = REQUIRED  # it took "--version" as its value: the usage followed, or its setter refused it
    second = _run_all([[f"--{name}=x", "--version"] for name in unvalued], binary)
    for name, run in zip(unvalued, second):
        arity[name] = NONE if run is not None and "doesn't allow an argument" in run[2] else OPTIONAL
    return arity


def _run_all(argvs: list[list[str]], binary: str) -> list[tuple[int, str, str] | None]:
    """Runs sbatch once per argv, all at once; (exit code, stdout, stderr) each, None for one that did not run."""
    environ = {**os.environ, "LC_ALL": "C"}  # getopt's messages are read, in its own words
    procs: list[subprocess.Popen[str] | None] = []
    for argv in argvs:
        try:
            procs.append(subprocess.Popen([binary, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, errors="replace", env=environ))
        except OSError:
            procs.append(None)
    deadline = time.monotonic() + READ_TIMEOUT
    results: list[tuple[int, str, str] | None] = []
    for proc in procs:
        if proc is None:
            results.append(None)
            continue
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            results.append((proc.returncode, out, err))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            results.append(None)
    return results


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


def cache_file(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(base) / "compass" / CACHE_NAME


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
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        lock = open(cache.with_suffix(".lock"), "a")
    except OSError:
        return read_table(path) or BUILTIN  # no cache: read every time
    with lock:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)  # many submissions at once: one reads, the others wait for its table
        table = cached(cache, path, key)
        if table is None:
            table = read_table(path)
            if table is None:
                return BUILTIN  # not cached: sbatch may answer next time (slurm.conf back, slurmctld reachable)
            save(cache, path, key, table)
        return table


def stat_key(path: str) -> dict[str, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def cached(cache: Path, path: str, key: dict[str, int]) -> OptionTable | None:
    """The table cached for the binary at ``path`` (its real path) if ``key`` (its stat) still matches."""
    try:
        doc = json.loads(cache.read_text())
        entry = doc["binaries"][path] if doc["format"] == _FORMAT else {}
        if any(entry[field] != value for field, value in key.items()):
            return None
        if not 0 <= time.time() - entry["read_at"] < MAX_AGE:
            return None
        return OptionTable(entry["long"], entry["short"], origin=f"read from {path} ({entry['version']})",
                           version=entry["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(cache: Path, path: str, key: dict[str, int], table: OptionTable) -> None:
    """Caches ``table`` for the binary at ``path`` as it was when read (``key``), beside the other binaries'."""
    try:
        doc = json.loads(cache.read_text())
        binaries = doc["binaries"] if doc.get("format") == _FORMAT else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        binaries = {}
    binaries[path] = {**key, "read_at": time.time(), "version": table.version, "long": dict(table.long),
                      "short": dict(table.short)}
    temporary = cache.with_name(f".{cache.name}.{os.getpid()}")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps({"format": _FORMAT, "binaries": binaries}))
        os.replace(temporary, cache)  # readers never see half a file
    except OSError:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass
