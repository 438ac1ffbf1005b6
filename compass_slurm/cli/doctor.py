"""``compass doctor``: check the installation piece by piece; every failed check says how to fix it.

Each check ends PASS, INFO (worth knowing, nothing wrong: e.g. running on defaults
without a config file) or FAIL (exit 1).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import click

from .common import CONTEXT_SETTINGS, SCHEMA_VERSION, console, emit_json, json_option
from .options import SLURM_HINT

#: every subpackage an installation must ship (tests/cli/test_doctor_packages.py holds it to the source tree)
PACKAGES = ("cli", "engine", "engine.policies", "service", "sim", "slurm", "submit")


PASS, INFO, WARN, FAIL = "pass", "info", "warn", "fail"
_STYLE = {PASS: "green", INFO: "blue", WARN: "yellow", FAIL: "red"}


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    hint: str = ""
    level: str = PASS  # pass | info | warn | fail; ok is False only for fail


class Failed(Exception):
    """A check failed: the message is the detail, ``hint`` the fix."""

    def __init__(self, detail: str, hint: str) -> None:
        super().__init__(detail)
        self.hint = hint


class Info(Failed):
    """Not a failure, but worth saying (the hint says what to do if it is not what the admin wants)."""
    level = INFO


class Warn(Info):
    """Not a failure yet, but something is wrong (e.g. the decision log behind: records wait in its spool)."""
    level = WARN


@click.command("doctor", context_settings=CONTEXT_SETTINGS)
@json_option
@click.option("--config", "config_file", metavar="FILE", help="Config file to check (default: $COMPASS_CONFIG, "
              "else /etc/compass/config.toml).")
def command(as_json: bool, config_file: str | None) -> None:
    """Check the installation, Slurm, the backend, GPU accounting, the decision log, the daemon socket and the config.

    Exits 1 when any check fails; INFO lines (e.g. no config file: defaults) are not failures.
    """
    checks = Doctor(config_file).run()
    ok = all(c.ok for c in checks)
    if as_json:
        emit_json({"schema_version": SCHEMA_VERSION, "ok": ok, "checks": [asdict(c) for c in checks]})
    else:
        out = console()
        for c in checks:
            out.print(f"[{_STYLE[c.level]}]{c.level.upper()}[/] {c.name}: ", end="")
            out.print(c.detail, markup=False)
            if c.hint:
                out.print(f"     {'fix' if c.level == FAIL else 'note'}: {c.hint}", markup=False)
    if not ok:
        sys.exit(1)


class Doctor:
    """Runs the checks in order; later ones reuse what earlier ones found (config, backend, state)."""

    def __init__(self, config_file: str | None) -> None:
        self.config_file = config_file
        self.config: Any = None
        self.backend: Any = None
        self.state: Any = None

    def run(self) -> list[Check]:
        steps: list[tuple[str, Callable[[], str]]] = [
            ("installation", self.installation),
            ("config file", self.config_check),
            ("Slurm version", self.slurm_version),
            ("backend", self.backend_check),
            ("--json support", self.json_support),
            ("GPU usage source", self.gpu_source),
            ("migration budget", self.migration_budget),
            ("decision log", self.database),
            ("daemon socket", self.daemon_socket),
            ("submit hook", self.submit_hook),
        ]
        checks = []
        for name, step in steps:
            try:
                checks.append(Check(name, True, step()))
            except Info as info:
                checks.append(Check(name, True, str(info), info.hint, info.level))
            except Failed as failure:
                checks.append(Check(name, False, _short(str(failure)), failure.hint, FAIL))
        return checks

    def installation(self) -> str:
        """Every subpackage and module imports: an install that lost a package fails here, not in the daemon."""
        import importlib
        import pkgutil

        import compass_slurm

        broken = []
        for name in PACKAGES:
            try:
                importlib.import_module(f"compass_slurm.{name}")
            except ImportError as err:
                broken.append(f"compass_slurm.{name} ({err})")
        modules = list(pkgutil.walk_packages(compass_slurm.__path__, "compass_slurm.",
                                             onerror=lambda name: broken.append(name)))
        for module in modules:
            try:
                importlib.import_module(module.name)
            except Exception as err:  # whatever breaks an import is what the install did wrong
                broken.append(f"{module.name} ({type(err).__name__}: {err})")
        where = os.path.dirname(compass_slurm.__file__)
        if broken:
            raise Failed(f"{where}: cannot import {', '.join(dict.fromkeys(broken))}",
                         "reinstall the package (pip install --force-reinstall /path/to/compass_slurm); "
                         "a build that leaves out a subpackage is a bug: report it")
        return f"{len(modules)} modules in {len(PACKAGES)} subpackages import from {where}"

    def config_check(self) -> str:
        from ..config import DEFAULT_FILE, ConfigError, Config, load_config
        from ..engine.policies.base import policy_names

        file = self.config_file or os.environ.get("COMPASS_CONFIG") or str(DEFAULT_FILE)
        try:
            self.config = load_config(self.config_file)
        except ConfigError as err:
            self.config = Config()
            raise Failed(str(err), "fix the setting; `compass config show` prints every value and its source") from None
        # the policies are no part of the config's own checks, which the wrapper runs and must not load them
        policy, known = self.config.policy, policy_names()
        if policy not in known:
            raise Failed(f"policy = {policy!r} (from {self.config.sources['policy']}) is not one of {', '.join(known)}",
                         "fix the setting: the daemon refuses to start with it; `compass policies` describes each one")
        if not os.path.exists(file):  # the default file is optional (a named one that is missing fails above)
            raise Info(f"no config file at {file}; running on defaults",
                       "to change a setting, install etc/config.toml as /etc/compass/config.toml (or set COMPASS_CONFIG)")
        from .status import queue_text

        c = self.config
        return f"{file} (policy {c.policy}, queue {queue_text(c.queue, c.slack)}, socket {c.socket})"

    def slurm_version(self) -> str:
        from ..slurm import SlurmError
        from ..slurm.cli_backend import CliBackend

        try:
            return f"Slurm {CliBackend(timeout=10).version()}"
        except SlurmError as err:
            raise Failed(str(err), "install the Slurm client commands (Debian: apt-get install slurm-client) "
                                   "and put them on PATH") from None

    def backend_check(self) -> str:
        from ..slurm import SlurmError, open_backend

        try:
            self.backend = open_backend(timeout=10)
            self.state = self.backend.read_state()
        except SlurmError as err:
            raise Failed(str(err), SLURM_HINT) from None
        gpu_nodes = sum(1 for n in self.state.nodes if n.gpus > 0)
        return (f"{self.backend.name} ({self.backend.chosen_because}): read {len(self.state.nodes)} nodes "
                f"({gpu_nodes} with GPUs), {len(self.state.jobs)} jobs, {len(self.state.partitions)} partitions")

    def json_support(self) -> str:
        """Which commands the CLI backend reads nodes and jobs with, and why text where it reads text."""
        from ..slurm import SlurmError
        from ..slurm.cli_backend import JSON_SINCE, CliBackend

        backend = self.backend if type(self.backend) is CliBackend else CliBackend(timeout=10, narrow=None, lines=None)
        try:
            if backend is not self.backend:
                backend.read_state()  # a first read finds the documents it cannot read
            commands = {kind: " ".join(argv) for kind, argv in backend.read_commands().items()}
            if backend.uses_narrow:
                commands["jobs"] = "squeue --json of the jobs whose line in the narrow read (squeue --Format) changed"
            elif backend.uses_lines:
                commands["jobs"] += ", each line parsed once (squeue --json in a cycle with a line it cannot trust)"
            elif backend.lines_reason is not None:
                commands["jobs"] += f" (not by line: {backend.lines_reason})"
            elif backend.narrow_reason is not None:
                commands["jobs"] += f" (not the narrow read: {backend.narrow_reason})"
        except (SlurmError, ValueError) as err:
            raise Failed(f"cannot tell: {err}", SLURM_HINT) from None
        since = ".".join(f"{part:02d}" if k else str(part) for k, part in enumerate(JSON_SINCE))
        if not backend.uses_json:
            return (f"text: nodes by {commands['nodes']}, jobs by {commands['jobs']} "
                    f"(Slurm {backend.version()} is older than {since}, which has no --json)")
        if not backend.text_reasons:
            return f"JSON: nodes by {commands['nodes']}, jobs by {commands['jobs']} (Slurm {backend.version()})"
        why = "; ".join(f"{kind}: {reason}" for kind, reason in backend.text_reasons.items())
        return (f"JSON where readable: nodes by {commands['nodes']}, jobs by {commands['jobs']} "
                f"(Slurm {backend.version()}; text because {why})")

    def gpu_source(self) -> str:
        """Where GPU use is read from, and the GPU nodes compass leaves to Slurm (all of them fails: no cycle runs)."""
        from ..slurm.translate import Translator, left_to_slurm_text

        if self.state is None:
            raise Failed("no Slurm state to look at (see the backend check)", SLURM_HINT)
        gpus = [n for n in self.state.nodes if n.gpus > 0]
        if not gpus:
            raise Failed("no node reports gpu GRES",
                         "configure GresTypes=gpu and Gres=gpu:N on the nodes in slurm.conf, with gres.conf File= lines")
        used = sum(n.gpus_used for n in gpus)
        found = (f"per-node GresUsed and per-job GRES detail (no slurmdbd needed): "
                 f"{used}/{sum(n.gpus for n in gpus)} GPUs in use")
        translator = Translator(self.state, self.config.partitions)
        left = translator.left_to_slurm
        named = f"; {left_to_slurm_text(left)}" if left else ""
        if not translator.slurm_nodes:
            scope = ", ".join(self.config.partitions) or "all partitions"
            raise Failed(f"{found}; no GPU node compass places on in {scope}{named}",
                         "the daemon skips every cycle: the `partitions` setting must name partitions with such nodes")
        if left:
            raise Info(found + named, "compass places no job on those nodes: Slurm places every job there")
        return found

    def migration_budget(self) -> str:
        """The ``migrations_per_hour`` setting and its ``migrations_burst`` cap, and what they come to on the GPU
        nodes the daemon would manage."""
        from ..engine.rate_limit import BURST_DEFAULT, PER_NODE, PER_NODE_FLOOR, per_burst
        from ..service.status import managed_budget
        from .status import budget_text

        setting, burst = self.config.migrations_per_hour, self.config.migrations_burst
        named = f"migrations_per_hour = {setting!r}" + (
            f", migrations_burst = {burst!r}" if burst != BURST_DEFAULT else "")
        if self.state is None:
            if setting == PER_NODE:
                raise Info(f"{PER_NODE}: one migration per managed GPU node per hour, at least {PER_NODE_FLOOR}; "
                           "the node count needs Slurm (see the backend check)", SLURM_HINT)
            return named
        resolved = managed_budget(self.state, setting, self.config.partitions)
        scope = ", ".join(self.config.partitions) or "all partitions"
        return f"{named}: {budget_text(setting, resolved, burst, per_burst(burst, resolved))} ({scope})"

    def database(self) -> str:
        from ..service.store import SCHEMA_VERSION as CODE_SCHEMA
        from ..service.store import Store, StoreError

        behind = self._spool()
        try:
            with Store.open(self.config.db or None, create=False) as store:
                found = f"{store.name}: schema version {store.schema_version()} (this compass writes {CODE_SCHEMA})"
        except StoreError as err:
            raise Failed(f"{err.message}{behind[0] if behind else ''}",
                         err.hint or "check --db / COMPASS_DB / the db setting") from None
        if behind is None:
            return f"{found}; nothing waits in its spool"
        text, full = behind
        if full:
            raise Failed(found + text, "the daemon changes no jobs: get the database writing again (it empties the "
                         "spool into it by itself), or raise spool_max_mb")
        raise Warn(found + text, "the daemon writes them to the log by itself once the database takes writes again")

    def _spool(self) -> tuple[str, bool] | None:
        """How far the log is behind, as the daemon's spool says (see service/spool.py), and whether the spool is
        full; None when nothing waits."""
        import time

        from sqlalchemy.exc import SQLAlchemyError

        from ..service.spool import read_backlog, spool_path
        from ..service.store import resolve_db_url

        try:
            path = spool_path(self.config.log_spool, resolve_db_url(self.config.db or None))
            backlog = read_backlog(path)
        except (ValueError, SQLAlchemyError):  # an invalid URL: the log's own check says so
            return None
        except OSError as err:
            return f"; its spool {err.filename} cannot be read ({err.strerror})", False
        if not backlog.size:
            return None
        full = backlog.size >= self.config.spool_max_mb * 2**20
        age = "" if backlog.oldest is None else f", the oldest {max(0.0, time.time() - backlog.oldest):.0f} s old"
        return (f"; the log is behind: {backlog.records} records wait in its spool {path}{age}"
                f"{' (full: the daemon changes no jobs)' if full else ''}"), full

    def daemon_socket(self) -> str:
        from ..service import control

        path = self.config.socket
        try:
            reply = control.request(path, {"op": "ping"}, timeout=2.0)
        except control.ControlUnavailable as err:
            raise Failed(f"{path}: {err}", "start the daemon: systemctl enable --now compass-daemon; "
                                           "its log: journalctl -u compass-daemon") from None
        if not reply.get("ok"):
            raise Failed(f"{path}: the daemon answered {reply.get('error')!r}", "see journalctl -u compass-daemon")
        answers = f"{path}: the daemon answers (policy {reply.get('policy')}, cycle {reply.get('cycle')})"
        if unknown := reply.get("held_unknown"):
            raise Failed(f"{answers}, but held jobs {','.join(unknown)} may be its requeues, which it cannot tell "
                         "from an admin's hold: its decision log cannot be read, nor a note of its own",
                         "release each one no admin held (scontrol release JOB): the daemon places it afresh; it "
                         "tells its own requeues by itself once its log can be read")
        leader = reply.get("leader")
        if reply.get("role") == "standby":
            if leader is None:
                raise Warn(f"{answers} and stands by, and no daemon leads",
                           "it claims the lead at its next cycle; if that lasts, see journalctl -u compass-daemon")
            leads = f"{leader['host']} pid {leader['pid']} leads (since {leader['since']})"
            if (age := _renewed_ago(leader)) is not None:
                raise Warn(f"{answers}; it stands by: {leads}, but renewed its lease last {age:.0f} s ago (lease: "
                           f"{leader['lease_s']:g} s): it may be gone",
                           "the standby takes the lead once the lease stood still a whole lease on its own clock; if "
                           "it does not, see journalctl -u compass-daemon on both hosts")
            return f"{answers}; it stands by: {leads}"
        token = f", token {leader['token']}" if leader and leader.get("token") else ""
        return f"{answers}; it leads{token}"


    def submit_hook(self) -> str:
        """What the job_submit/lua hook sees: its config and the anchors file's age."""
        from ..submit.hook import HookConfigError, status

        path = self.config.hook_config
        if not path:
            return "hook_config is empty: the admin maintains the hook's config (not checked)"
        if not os.path.exists(path):
            return (f"no hook config at {path}: the job_submit/lua hook, where installed, leaves every job "
                    "to Slurm (the daemon writes it at start)")
        try:
            seen = status(path)
        except HookConfigError as err:
            raise Failed(f"{err}; until fixed, the hook leaves every GPU job to Slurm",
                         "start the daemon (it rewrites the hook config at start) or fix the file; the hook's "
                         "lines in slurmctld's log start with 'compass:'") from None
        return (f"{path}: lease {seen.settings['lease']:g} s, staleness {seen.settings['staleness']:g} s; "
                f"anchors {seen.anchors_age:.0f} s old: GPU jobs submitted now are managed")


#: a leader whose last renewal is older than this many of its leases, by this host's clock, may be gone (the
#: margin: the two hosts' clocks may differ; the election itself never compares them)
STALE_LEASES = 2


def _renewed_ago(leader: dict[str, Any]) -> float | None:
    """How long ago the leader of a ping's answer renewed its lease, in seconds, where that is past STALE_LEASES of
    its leases; else None."""
    import time
    from datetime import datetime

    renewed, lease = leader.get("renewed"), leader.get("lease_s")
    if not renewed or not lease:
        return None
    try:
        age = time.time() - datetime.fromisoformat(renewed).timestamp()
    except (TypeError, ValueError):
        return None
    return age if age > STALE_LEASES * lease else None


def _short(detail: str) -> str:
    """Slurm's multi-line complaints as their first and last line (the last is usually the fatal one)."""
    lines = [line for line in detail.splitlines() if line.strip()]
    return detail if len(lines) <= 2 else f"{lines[0]} ... {lines[-1]}"
