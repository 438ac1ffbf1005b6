"""sbatch's command line and ``#SBATCH`` directives, read the way sbatch itself reads them.

sbatch parses with getopt_long in "stop at the first operand" mode: options
come first, then the script and the script's own arguments (which are never
sbatch options); long options may be abbreviated to any unique prefix; short
options cluster (``-HN2``). The option table is the installed sbatch's
(compass_slurm.submit.options), else the built-in one, 22.05's. What sbatch
honours, lowest precedence first: ``#SBATCH`` lines of the script (read until
the first line that is neither blank nor a comment), the SBATCH_* input
environment variables, the command line.

Only the standard library, compass_slurm.slurm.gres (the one GRES reader) and
the option table, so the wrapper starts fast.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta

from ..slurm import gres
from ..timeparse import UNIT_S
from .options import BUILTIN, NONE, REQUIRED, OptionTable

#: the wrapper's own flag, stripped before sbatch sees the arguments
MIGRATABLE = "--migratable"

#: options after which sbatch prints something and exits without reading a script
INFORMATIONAL = frozenset({"help", "usage", "version"})

#: sbatch's input environment variables the wrapper reads (those that request GPUs, or leave a job to Slurm), and
#: the option each stands for
ENVIRONMENT = {
    "SBATCH_GPUS": "gpus", "SBATCH_GPUS_PER_NODE": "gpus-per-node", "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_GRES": "gres", "SBATCH_GPUS_PER_SOCKET": "gpus-per-socket", "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_RESERVATION": "reservation", "SBATCH_CLUSTERS": "clusters", "SLURM_CLUSTERS": "clusters",
}

_HETJOB_SEPARATORS = frozenset({"hetjob", "packjob"})

# sbatch --begin forms we resolve as sbatch does (others leave the job to plain sbatch)
_BEGIN_NOW = re.compile(r"now(?:([+-])(\d+)(seconds?|minutes?|hours?|days?|weeks?)?)?", re.IGNORECASE)
_BEGIN_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_BEGIN_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:T\d{1,2}:\d{2}(?::\d{2})?)?")
#: named times of day: the next one from now
_BEGIN_NAMED = {"midnight": time(0), "elevenses": time(11), "noon": time(12), "fika": time(15), "teatime": time(16)}


class SbatchArgsError(ValueError):
    """Arguments or directives that sbatch would reject or that we cannot read with certainty."""


class OptionError(SbatchArgsError):
    """An option the table does not have, or one used against its table entry (a value it takes no value for)."""


@dataclass(frozen=True, slots=True)
class Option:
    """One option as sbatch understands it: the full long name and its value (None: no value)."""

    name: str
    value: str | None = None


@dataclass(frozen=True)
class SbatchCommand:
    """An sbatch command line split the way sbatch splits it."""

    #: the option section exactly as written, minus --migratable and a closing "--"
    option_argv: tuple[str, ...]
    options: tuple[Option, ...]
    #: the script path and its arguments
    operands: tuple[str, ...] = ()
    migratable: bool = False
    #: a "--" ended the options
    dashdash: bool = False
    #: ":" separated components of a heterogeneous job
    heterogeneous: bool = False

    @property
    def script(self) -> str | None:
        return self.operands[0] if self.operands else None

    def argv(self, extra: Sequence[str] = ()) -> list[str]:
        """The arguments for sbatch, with ``extra`` options after the user's (so they win over the user's)."""
        return [*self.option_argv, *extra, *(["--"] if self.dashdash else []), *self.operands]


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a job asks for in GPUs, per option (None: not given)."""

    gpus: int | None = None
    gpus_per_node: int | None = None
    gpus_per_task: int | None = None
    #: GPUs per node from --gres=gpu[:type]:N
    gres_gpus: int | None = None
    gpu_type: str | None = None
    nodes: str | None = None
    ntasks: int | None = None

    @property
    def wants_gpus(self) -> bool:
        return any(n for n in (self.gpus, self.gpus_per_node, self.gpus_per_task, self.gres_gpus))


@dataclass
class _Parsed:
    argv: list[str] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    migratable: bool = False
    heterogeneous: bool = False


def parse_command_line(args: Sequence[str], table: OptionTable = BUILTIN) -> SbatchCommand:
    """Split sbatch's arguments into options and operands; unknown or malformed options raise OptionError."""
    parsed, rest = _parse(args, own_flags=True, table=table)
    dashdash = bool(rest) and rest[0] == "--"
    return SbatchCommand(
        option_argv=tuple(parsed.argv), options=tuple(parsed.options), operands=tuple(rest[dashdash:]),
        migratable=parsed.migratable, dashdash=dashdash, heterogeneous=parsed.heterogeneous,
    )


def parse_directives(script: bytes, table: OptionTable = BUILTIN) -> tuple[list[Option], bool]:
    """The options of a script's ``#SBATCH`` lines, and whether it separates heterogeneous components."""
    options: list[Option] = []
    heterogeneous = False
    for number, line in enumerate(script.decode("utf-8", errors="surrogateescape").splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if not line.startswith("#SBATCH"):
            if stripped.startswith("#"):
                continue
            break  # sbatch stops reading directives at the first command
        try:
            words = shlex.split(line[len("#SBATCH"):], comments=True)
        except ValueError as err:
            raise SbatchArgsError(f"script line {number}: {err}") from None
        if words and words[0] in _HETJOB_SEPARATORS:
            heterogeneous = True
            continue
        try:
            parsed, rest = _parse(words, own_flags=False, table=table)
        except SbatchArgsError as err:
            raise type(err)(f"script line {number}: {err}") from None
        if rest:
            raise SbatchArgsError(f"script line {number}: not an option: {rest[0]!r}")
        options.extend(parsed.options)
    return options, heterogeneous


def environment_options(environ: Mapping[str, str]) -> list[Option]:
    """The options of ENVIRONMENT sbatch takes from its input environment variables."""
    return [Option(name, environ[var]) for var, name in ENVIRONMENT.items() if environ.get(var)]


def last(options: Iterable[Option], name: str) -> str | None:
    """The value that wins for ``name`` (sbatch keeps the last one given); None if it was never given."""
    value = None
    for option in options:
        if option.name == name:
            value = option.value if option.value is not None else ""
    return value


def last_of(options: Iterable[Option], *names: str) -> str | None:
    """Which of ``names`` was given last (``--requeue`` then ``--no-requeue``: the latter wins); None: none."""
    found = None
    for option in options:
        if option.name in names:
            found = option.name
    return found


def gpu_request(options: Iterable[Option]) -> GpuRequest:
    """The GPU request of ``options`` (directives, then environment, then command line: later ones win)."""
    options = list(options)
    gpus, type_gpus = _typed_count(last(options, "gpus"), "gpus")
    per_node, type_node = _typed_count(last(options, "gpus-per-node"), "gpus-per-node")
    per_task, type_task = _typed_count(last(options, "gpus-per-task"), "gpus-per-task")
    if per_task is None:  # 23.11's --tres-per-task=gres/gpu[:type]=N (or :N), as Slurm records --gpus-per-task too
        per_task, type_task = _gres_gpus(last(options, "tres-per-task"), "tres-per-task")
    gres, type_gres = _gres_gpus(last(options, "gres"))
    ntasks = last(options, "ntasks")
    if ntasks is not None and not ntasks.isdigit():
        raise SbatchArgsError(f"--ntasks={ntasks!r} is not a number")
    return GpuRequest(
        gpus=gpus, gpus_per_node=per_node, gpus_per_task=per_task, gres_gpus=gres,
        gpu_type=type_gpus or type_node or type_task or type_gres,
        nodes=last(options, "nodes"), ntasks=int(ntasks) if ntasks is not None else None,
    )


def begin_time(value: str, now: datetime) -> datetime | None:
    """The local time ``--begin=value`` names, as sbatch resolves it against ``now`` (naive local time);
    None for the forms we do not read (``MMDD[YY]``, ``MM/DD``, ``AM``/``PM``: sbatch still does).

    A time of day alone means its next occurrence (tomorrow once it has passed today).
    """
    text = value.strip()
    if match := _BEGIN_NOW.fullmatch(text):
        sign, count, unit = match.groups()
        seconds = int(count or 0) * UNIT_S[(unit or "s")[0].lower()]
        return now + timedelta(seconds=-seconds if sign == "-" else seconds)
    lowered = text.lower()
    if lowered in ("today", "tomorrow"):
        midnight = datetime.combine(now.date(), time(0))
        return midnight + timedelta(days=1) if lowered == "tomorrow" else midnight
    if lowered in _BEGIN_NAMED:
        return _next(datetime.combine(now.date(), _BEGIN_NAMED[lowered]), now)
    if match := _BEGIN_CLOCK.fullmatch(text):
        hour, minute, second = (int(part or 0) for part in match.groups())
        if hour > 23 or minute > 59 or second > 59:
            return None
        return _next(datetime.combine(now.date(), time(hour, minute, second)), now)
    if _BEGIN_DATE.fullmatch(text):
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            return None
    return None


def _next(moment: datetime, now: datetime) -> datetime:
    return moment + timedelta(days=1) if moment < now else moment


def _parse(args: Sequence[str], own_flags: bool, table: OptionTable) -> tuple[_Parsed, list[str]]:
    """getopt_long with a leading '+': returns the options and everything from the first operand on."""
    parsed = _Parsed()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        if own_flags and arg == MIGRATABLE:
            parsed.migratable = True
        elif arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            full = _long_name(name, table)
            arity = table.long[full]
            if arity == NONE and eq:
                raise OptionError(f"option --{full} takes no value")
            if arity == REQUIRED and not eq:
                if i + 1 >= len(args):
                    raise OptionError(f"option --{full} needs a value")
                i += 1
                value = args[i]
                parsed.argv.append(arg)
            parsed.options.append(Option(full, value if (eq or arity == REQUIRED) else None))
        else:
            i = _short_cluster(args, i, parsed, table)
            i += 1
            continue
        if not (own_flags and arg == MIGRATABLE):
            parsed.argv.append(args[i])
        i += 1
    rest = list(args[i:])
    if rest and rest[0] == ":":
        parsed.heterogeneous = True  # sbatch [options] : [options] script: a heterogeneous job
    return parsed, rest


def _short_cluster(args: Sequence[str], i: int, parsed: _Parsed, table: OptionTable) -> int:
    """Reads ``-HN2`` / ``-N 2``; returns the index of the last argument consumed."""
    arg = args[i]
    parsed.argv.append(arg)
    pos = 1
    while pos < len(arg):
        letter = arg[pos]
        name = table.short.get(letter)
        if name is None or name not in table.long:
            raise OptionError(f"option -{letter} is unknown to this wrapper")
        arity = table.long[name]
        attached = arg[pos + 1:]
        if arity == NONE or (arity != REQUIRED and not attached):
            parsed.options.append(Option(name))
            pos += 1
            continue
        if attached:
            parsed.options.append(Option(name, attached))
        elif i + 1 < len(args):
            i += 1
            parsed.argv.append(args[i])
            parsed.options.append(Option(name, args[i]))
        else:
            raise OptionError(f"option -{letter} needs a value")
        break
    return i


def _long_name(name: str, table: OptionTable) -> str:
    """The option a (possibly abbreviated) long name stands for, as getopt_long resolves it."""
    if name in table.long:
        return name
    matches = [full for full in table.long if full.startswith(name)] if name else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise OptionError(f"option --{name} is ambiguous ({', '.join('--' + m for m in sorted(matches))})")
    raise OptionError(f"option --{name} is unknown to this wrapper")


def _typed_count(value: str | None, option: str) -> tuple[int | None, str | None]:
    """``[type:]N`` or a comma list of them: the total count and the type if there is exactly one."""
    if value is None:
        return None, None
    try:
        return gres.typed_count(value)
    except gres.GresError:
        raise SbatchArgsError(f"--{option}={value!r} is not [type:]count") from None


def _gres_gpus(value: str | None, option: str = "gres") -> tuple[int | None, str | None]:
    """GPUs in a --gres list such as ``gpu:a100:2,nvme:1`` (a bare ``gpu`` is one GPU), or in a --tres-per-task
    list such as ``cpu=4,gres/gpu:a100=2`` (its other TRES are not GRES)."""
    if value is None:
        return None, None
    text = value
    if option == "tres-per-task":
        text = ",".join(part for part in value.split(",") if part.strip().startswith("gres/"))
    try:
        items = [item for item in gres.parse(text) if item.name == "gpu"]
    except gres.GresError as err:
        raise SbatchArgsError(f"--{option}={value!r}: {err}") from None
    if not items:
        return None, None
    types = {item.type for item in items if item.type}
    return sum(item.count for item in items), types.pop() if len(types) == 1 else None
