"""``compass daemon``: the helper daemon that places managed GPU jobs (see compass_slurm.service.daemon)."""

from __future__ import annotations

import logging
import signal
import sys
from typing import TYPE_CHECKING

import click

from ..slurm import BACKENDS
from .common import CONTEXT_SETTINGS, UserError
from .options import not_empty

if TYPE_CHECKING:
    from ..config import Config

LOG_FORMAT = "%(asctime)s compass-daemon %(levelname)s %(message)s"


@click.command("daemon", context_settings=CONTEXT_SETTINGS)
@click.option("--config", "config_file", metavar="FILE", help="Settings file (default: $COMPASS_CONFIG, "
              "else /etc/compass/config.toml).")
@click.option("--interval", type=click.FloatRange(min=0.1), metavar="S", help="Seconds between cycles.")
@click.option("--once", is_flag=True, help="Run one cycle and exit (exit 1 if it was skipped or its log "
              "could not be written).")
@click.option("--dry-run", is_flag=True, help="Print the scontrol commands instead of running them.")
@click.option("--db", metavar="URL", callback=not_empty, help="Decision log (SQLAlchemy URL); default: "
              "$COMPASS_DB, the config file's db, else the system log.")
@click.option("--policy", metavar="NAME", help="Placement policy (see `compass policies`).")
@click.option("--snapshot", metavar="FILE", callback=not_empty,
              help="Read a saved Slurm state instead of Slurm (implies a dry run).")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="How to read Slurm: pyslurm when it matches Slurm and reads (auto), or always cli or pyslurm.")
@click.option("-v", "--verbose", is_flag=True, help="Also log why managed jobs are left to Slurm.")
def command(config_file: str | None, interval: float | None, once: bool, dry_run: bool, db: str | None,
            policy: str | None, snapshot: str | None, backend: str, verbose: bool) -> None:
    """Place pending GPU jobs with COMPASS-ABS: observe Slurm, adopt, decide, pin, migrate, log.

    Runs in the foreground (systemd Type=simple); SIGTERM or SIGINT stop it between cycles.
    Logs go to stderr, one line per decision.
    """
    from ..config import ConfigError, load_config
    from ..service.control import ControlError, ControlServer
    from ..service.daemon import Daemon
    from ..engine.model import EngineError
    from ..engine.policies.base import policy_class
    from ..native_stdout import native_stdout_silenced
    from ..slurm import DryRunBackend, SlurmError, open_backend
    from ..slurm.pyslurm_backend import PyslurmUnavailable
    from ..service.store import StoreError, probe, resolve_db_url, shown_url

    try:
        config = load_config(config_file, flags={"interval": interval, "db": db, "policy": policy})
        policy_class(config.policy)
    except (ConfigError, EngineError) as err:
        raise UserError(str(err)) from None
    try:  # a wrong URL or a server that does not answer stops the start (systemd retries), a failing file does not
        probe(config.db or None)
    except StoreError as err:
        raise UserError(err.message, hint=err.hint) from None
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT)
    try:
        reader = open_backend(backend, snapshot=snapshot)
    except PyslurmUnavailable as err:
        raise UserError(str(err), hint="use --backend cli, or install pyslurm built for this Slurm") from None
    except SlurmError as err:
        raise UserError(str(err), hint="record one with `compass snapshot save FILE`" if snapshot else
                        "check that sinfo, squeue and scontrol work here (`compass doctor`)") from None
    logging.getLogger("compass.daemon").info("backend %s (%s)", reader.name, reader.chosen_because)
    if dry_run and snapshot is None:
        reader = DryRunBackend(reader)
    simulated = dry_run or snapshot is not None
    daemon = Daemon(config, reader, resolve_db_url(config.db or None), dry_run=simulated, publish=not simulated)
    if once:
        with native_stdout_silenced():  # the Phi* solver's native output stays out of --dry-run's commands
            report = daemon.cycle()
        daemon.close()
        # a running daemon goes on past a log it cannot write (the spool keeps the records); one cycle asked for
        # by hand, to try a set-up, must not pass for one that worked
        sys.exit(1 if report.skipped or report.log_failed else 0)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: daemon.shutdown())
    log = logging.getLogger("compass.daemon")
    server = None
    if not simulated:  # a dry run must not take the live daemon's socket
        try:
            server = ControlServer(config.socket, daemon.handlers())
            server.start()
        except ControlError as err:
            raise UserError(str(err), hint="set `socket` in the config or COMPASS_SOCKET") from None
    log.info("started: policy %s, every %g s, backend %s, log %s, socket %s", config.policy, config.interval,
             reader.name, shown_url(daemon.db), config.socket if server else "none")
    if config.hook_config and not simulated:
        _write_hook_config(config, log)
    try:
        with native_stdout_silenced():
            daemon.run(config.interval)
    finally:
        if server is not None:
            server.stop()
    log.info("stopped after %d cycles", daemon.cycles)


def _write_hook_config(config: Config, log: logging.Logger) -> None:
    """The job_submit/lua hook's settings, from ours; a failure leaves the hook fail-open, not the daemon down."""
    from ..submit.hook import write_config

    try:
        path = write_config(config)
    except OSError as err:
        log.error("cannot write the job_submit hook's config %s: %s (the hook leaves GPU jobs to Slurm)",
                  config.hook_config, err.strerror or err)
        return
    log.info("job_submit hook config written to %s", path)
