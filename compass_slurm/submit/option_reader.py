"""Reads sbatch's option table from the sbatch itself (compass_slurm.submit.options caches it; imported on a
cache miss only). None of these reads can submit a job: each ends in ``--help``, ``--usage`` or ``--version``,
which sbatch's first pass over its options acts on and exits.

- the names: getopt itself lists every long option when asked for the empty
  prefix (``sbatch --=``: "ambiguous; possibilities: '--account' ...");
- the forms: ``--help`` and ``--usage`` show ``--name=x`` (a value), ``--name[=x]``
  (an optional one) or ``--name``. That text omits options (``--segment``,
  ``--extra``) and misstates some (22.05's ``--wrap[=...]`` needs its value,
  ``--container-id`` is shown bare until 26.05), so it only says which names
  need a closer look: one the built-in table lacks, or shown otherwise;
- a closer look asks getopt: ``sbatch --NAME --version --usage`` prints the version
  when NAME did not take the next word as its value; ``sbatch --NAME=x --version``
  then tells an optional value from none.

Names the built-in table and the text agree on keep the built-in entry (22.05's,
checked against the binary). The tables read this way equal Slurm's own
(src/common/slurm_opt.c) on 22.05, 23.11, 24.11, 25.11 and 26.05.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterable

from .options import BUILTIN, NONE, OPTIONAL, REQUIRED, OptionTable

#: one read of sbatch (it loads slurm.conf, or fetches it from slurmctld in a configless setup)
READ_TIMEOUT = 10.0

# an option as --help's first column shows it: "  -a, --array=indexes", "  -B  --extra-node-info=S", "      --bb=<spec>"
_HELP_LINE = re.compile(r"^ {1,8}(?:-([A-Za-z]),? +)?--([a-z][a-z0-9-]*)(\[=|=)?", re.MULTILINE)
# and as --usage shows it: "[--nice[=value]]", "[--hold]"
_USAGE_ITEM = re.compile(r"\[--([a-z][a-z0-9-]*)(\[=|=)?")
_POSSIBILITIES = re.compile(r"possibilities:((?: '--[^']+')+)")


def parse_help(*texts: str) -> tuple[dict[str, str], dict[str, str]]:
    """The forms ``--help`` and ``--usage`` show: name -> REQUIRED (``=x``), OPTIONAL (``[=x]``) or NONE (only
    ever bare), and short letter -> name. The first value form shown wins (``--help``'s, given first, over
    ``--usage``'s); a bare mention never hides one (``--propagate[=rlimits]`` in one, ``[--propagate]`` in the
    other)."""
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
    # a probe that did not answer (timed out) leaves a built-in name as built in, and a new one out
    long = {name: known.get(name) or probed.get(name) or BUILTIN.long.get(name) for name in names}
    long = {name: arity for name, arity in long.items() if arity is not None}
    short = {letter: name for letter, name in {**BUILTIN.short, **letters}.items() if name in long}
    version = version_run[1].strip()
    return OptionTable(long, short, version=version)


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
