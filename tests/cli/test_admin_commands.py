"""``compass doctor``, ``config show``, ``policies`` and the conventions every command keeps."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from admin_cli import MIXED, invoke, json_of

from compass_slurm.cli import COMMANDS
from compass_slurm.service.store import SCHEMA_VERSION, Store

COMPASS = Path(sys.executable).parent / "compass"
READ_COMMANDS = [("status", "--snapshot", str(MIXED)), ("policies",), ("config", "show"), ("doctor",)]


def test_doctor_without_slurm_fails_each_check_with_a_hint(monkeypatch, isolated: Path) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("COMPASS_SOCKET", str(isolated.parent / "no.sock"))
    result = invoke("doctor", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert doc["ok"] is False and doc["schema_version"] == 1
    assert list(checks) == ["installation", "config file", "Slurm version", "backend", "--json support",
                            "GPU usage source", "migration budget", "decision log", "daemon socket", "submit hook"]
    # the default budget counts the managed GPU nodes, which only Slurm can tell: said, not failed
    assert checks["migration budget"]["level"] == "info" and "per-node" in checks["migration budget"]["detail"]
    assert checks["config file"]["ok"] is True  # the isolated config file exists
    assert checks["installation"]["ok"] is True
    for name in ("Slurm version", "backend", "GPU usage source", "decision log", "daemon socket"):
        assert checks[name]["ok"] is False and checks[name]["hint"], name
    assert "cannot run" in checks["Slurm version"]["detail"]
    assert "slurm-client" in checks["Slurm version"]["hint"]
    assert "systemctl enable --now compass-daemon" in checks["daemon socket"]["hint"]
    text = invoke("doctor")
    assert text.exit_code == 1 and "FAIL Slurm version" in text.stdout and "fix: install the Slurm" in text.stdout


def test_doctor_passes_the_log_check_with_a_database(tmp_path: Path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'ok.db'}"
    Store.open(url).close()
    monkeypatch.setenv("COMPASS_DB", url)
    checks = {c["name"]: c for c in json.loads(invoke("doctor", "--json").stdout)["checks"]}
    assert checks["decision log"]["ok"] and f"schema version {SCHEMA_VERSION}" in checks["decision log"]["detail"]


def test_doctor_missing_config_file(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COMPASS_CONFIG", str(tmp_path / "absent.toml"))
    checks = {c["name"]: c for c in json.loads(invoke("doctor", "--json").stdout)["checks"]}
    assert not checks["config file"]["ok"] and "does not exist" in checks["config file"]["detail"]
    assert checks["config file"]["level"] == "fail"  # a file the admin named is not optional


def test_doctor_on_defaults_without_a_config_file_is_info_not_failure(monkeypatch, tmp_path: Path) -> None:
    """The README's own set-up runs on defaults: the optional default file being absent is no failure."""
    from compass_slurm import config
    from compass_slurm.cli import doctor

    monkeypatch.delenv("COMPASS_CONFIG", raising=False)
    monkeypatch.setattr(config, "DEFAULT_FILE", tmp_path / "etc-compass-config.toml")
    # Slurm, the log and the daemon cannot run in a unit test: those checks pass as on a healthy cluster.
    for step in ("slurm_version", "backend_check", "json_support", "gpu_source", "database", "daemon_socket"):
        monkeypatch.setattr(doctor.Doctor, step, lambda self: "fine")
    result = invoke("doctor")
    assert result.exit_code == 0, result.output
    assert "INFO config file: no config file at" in result.stdout and "running on defaults" in result.stdout
    assert "FAIL" not in result.stdout
    checks = {c["name"]: c for c in json.loads(invoke("doctor", "--json").stdout)["checks"]}
    assert checks["config file"]["ok"] is True and checks["config file"]["level"] == "info"
    assert checks["decision log"]["level"] == "pass"


def test_config_show_names_each_source(isolated: Path, monkeypatch) -> None:
    isolated.write_text('[compass]\npolicy = "compass-wc"\ninterval = 5\n')
    monkeypatch.setenv("COMPASS_INTERVAL", "2.5")
    settings = json_of("config", "show")["settings"]
    assert settings["policy"] == {"value": "compass-wc", "source": str(isolated)}
    assert settings["interval"] == {"value": 2.5, "source": "COMPASS_INTERVAL"}
    assert settings["lease"] == {"value": 60.0, "source": "default"}
    text = invoke("config", "show", env={"COLUMNS": "120"}).stdout
    assert "compass-wc" in text and "COMPASS_INTERVAL" in text


def test_config_show_bad_value_is_a_clear_error(isolated: Path) -> None:
    isolated.write_text("[compass]\ninterval = -1\n")
    result = invoke("config", "show")
    assert result.exit_code == 2
    assert "interval = -1" in result.stderr and "hint: " in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("text", ["-0.5", "inf", "nan", '"some"'])
def test_a_bad_slack_is_one_line_and_exit_2(isolated: Path, text: str) -> None:
    isolated.write_text(f"[compass]\nslack = {text}\n")
    result = invoke("config", "show")
    assert result.exit_code == 2
    assert "slack = " in result.stderr and "Traceback" not in result.output
    isolated.write_text("[compass]\nslack = 0.5\n")
    assert json_of("config", "show")["settings"]["slack"]["value"] == 0.5


def test_the_spool_limit_may_be_0_but_must_be_finite(isolated: Path) -> None:
    isolated.write_text("[compass]\nspool_max_mb = 0\n")
    assert json_of("config", "show")["settings"]["spool_max_mb"]["value"] == 0.0
    isolated.write_text("[compass]\nspool_max_mb = inf\n")
    result = invoke("config", "show")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.splitlines()[0] == (f"compass: error: spool_max_mb = inf (from {isolated}) is not a valid "
                                             "non-negative number")


@pytest.mark.parametrize("where", ["file", "env"])
def test_doctor_fails_the_config_on_a_policy_the_daemon_would_refuse(isolated: Path, where: str) -> None:
    if where == "file":
        isolated.write_text('[compass]\npolicy = "nonexistent-policy"\n')
    env = {"COMPASS_POLICY": "nonexistent-policy"} if where == "env" else None
    doc = json.loads(invoke("doctor", "--json", env=env).stdout)
    check = next(c for c in doc["checks"] if c["name"] == "config file")
    source = str(isolated) if where == "file" else "COMPASS_POLICY"
    named = f"policy = 'nonexistent-policy' (from {source}) is not one of "
    # (the policies in the order they were registered: which modules were imported first)
    assert check["ok"] is False and check["detail"].startswith(named)
    assert {"compass-easy", "best-fit"} <= set(check["detail"].removeprefix(named).split(", "))
    assert check["hint"].startswith("fix the setting: the daemon refuses to start with it")


@pytest.mark.parametrize(("text", "value"), [("", "per-node"), ('"per-node"', "per-node"), ("48", 48), ("0", 0),
                                           ('"unlimited"', "unlimited"), ('"Unlimited"', "unlimited")])
def test_the_migration_budget_is_a_number_unlimited_or_per_node(isolated: Path, text: str, value) -> None:
    isolated.write_text(f"[compass]\nmigrations_per_hour = {text}\n" if text else "[compass]\n")
    assert json_of("config", "show")["settings"]["migrations_per_hour"]["value"] == value


@pytest.mark.parametrize(("where", "text"), [("file", "-1"), ("file", '"lots"'), ("file", "1.5"), ("env", "per_node")])
def test_a_bad_migration_budget_is_one_line_and_exit_2(isolated: Path, where: str, text: str) -> None:
    if where == "file":
        isolated.write_text(f"[compass]\nmigrations_per_hour = {text}\n")
        result = invoke("config", "show")
    else:
        result = invoke("config", "show", env={"COMPASS_MIGRATIONS_PER_HOUR": text})
    assert result.exit_code == 2
    (error, *_) = result.stderr.splitlines()
    assert error.startswith("compass: error: migrations_per_hour = ") and "Traceback" not in result.output
    assert "'unlimited' or 'per-node'" in error or "negative" in error


@pytest.mark.parametrize(("text", "value"), [("", "10%"), ("60", 60), ("0", 0), ('"10%"', "10%"),
                                           ('" 2.5% "', "2.5%"), ('"Unlimited"', "unlimited")])
def test_the_burst_cap_is_a_number_a_share_or_unlimited(isolated: Path, text: str, value) -> None:
    isolated.write_text(f"[compass]\nmigrations_burst = {text}\n" if text else "[compass]\n")
    assert json_of("config", "show")["settings"]["migrations_burst"]["value"] == value
    shown = invoke("config", "show", "--json", env={"COMPASS_MIGRATIONS_BURST": "5%"})
    assert json.loads(shown.stdout)["settings"]["migrations_burst"] == {"value": "5%",
                                                                         "source": "COMPASS_MIGRATIONS_BURST"}


@pytest.mark.parametrize(("where", "text", "problem"), [
    ("file", "-1", "negative"), ("file", '"per-node"', "or a share of the hourly budget such as '10%'"),
    ("file", '"0%"', "a share outside (0%, 100%]"), ("env", "lots", "not a whole number"),
    ("env", "200%", "a share outside")])
def test_a_bad_burst_cap_is_one_line_and_exit_2(isolated: Path, where: str, text: str, problem: str) -> None:
    if where == "file":
        isolated.write_text(f"[compass]\nmigrations_burst = {text}\n")
        result = invoke("config", "show")
    else:
        result = invoke("config", "show", env={"COMPASS_MIGRATIONS_BURST": text})
    assert result.exit_code == 2 and "Traceback" not in result.output
    (error, *_) = result.stderr.splitlines()
    assert error.startswith("compass: error: migrations_burst = ") and problem in error
    assert ("COMPASS_MIGRATIONS_BURST" if where == "env" else str(isolated)) in error


def test_doctor_says_the_budget_and_what_it_comes_to_on_the_managed_nodes(isolated: Path, monkeypatch) -> None:
    from compass_slurm.cli import doctor
    from compass_slurm.slurm import snapshot

    def read(self):
        self.state = snapshot.load(MIXED)  # 16 GPU nodes
        return "recorded"

    monkeypatch.setattr(doctor.Doctor, "backend_check", read)
    checks = {c["name"]: c for c in json.loads(invoke("doctor", "--json").stdout)["checks"]}
    budget = checks["migration budget"]
    assert (budget["level"], budget["detail"]) == ("pass", "migrations_per_hour = 'per-node': 16 migrations/h "
                                                           "(per-node), at most 2 in any 5 min (10%) (all partitions)")
    isolated.write_text('[compass]\nmigrations_per_hour = 12\npartitions = ["gpu"]\n')
    checks = {c["name"]: c for c in json.loads(invoke("doctor", "--json").stdout)["checks"]}
    assert checks["migration budget"]["detail"] == ("migrations_per_hour = 12: 12 migrations/h, "
                                                    "at most 2 in any 5 min (10%) (gpu)")
    isolated.write_text('[compass]\nmigrations_burst = "unlimited"\n')
    checks = {c["name"]: c for c in json.loads(invoke("doctor", "--json").stdout)["checks"]}
    assert checks["migration budget"]["detail"] == (
        "migrations_per_hour = 'per-node', migrations_burst = 'unlimited': 16 migrations/h (per-node) "
        "(all partitions)")


def test_doctor_says_the_slack_beside_the_queue(isolated: Path) -> None:
    isolated.write_text('[compass]\nslack = 0.5\n')
    checks = {c["name"]: c for c in json.loads(invoke("doctor", "--json").stdout)["checks"]}
    assert "queue backfill (slack 0.5)," in checks["config file"]["detail"]
    isolated.write_text('[compass]\nslack = 0\n')
    checks = {c["name"]: c for c in json.loads(invoke("doctor", "--json").stdout)["checks"]}
    assert "queue backfill," in checks["config file"]["detail"]

def test_the_shipped_example_config_loads() -> None:
    etc = Path(__file__).resolve().parents[2] / "etc" / "config.toml"
    settings = json_of("config", "show", "--config", str(etc))["settings"]
    assert settings["policy"] == {"value": "compass-easy", "source": str(etc)}
    assert settings["queue"] == {"value": "backfill", "source": str(etc)}
    assert settings["slack"] == {"value": 0, "source": str(etc)}
    assert settings["migrations_per_hour"] == {"value": "per-node", "source": str(etc)}
    assert settings["migrations_burst"] == {"value": "10%", "source": str(etc)}
    # the commented example names every setting, so an admin finds each one there
    assert [name for name, setting in settings.items() if setting["source"] != str(etc)] == ["db"]  # $COMPASS_DB here


def test_policies_lists_every_registered_policy() -> None:
    from compass_slurm.engine.policies.base import policy_names

    doc = json_of("policies")
    assert [p["name"] for p in doc["policies"]] == policy_names()
    assert {"name": "compass", "summary": "COMPASS-ABS with repair: at most 2 partial nodes while WCC holds"} \
        in doc["policies"]


# `compass submit` is a drop-in for sbatch: its -h is sbatch's own, passed through.
@pytest.mark.parametrize("name", sorted(set(COMMANDS) - {"submit"}))
def test_every_command_has_short_help(name: str) -> None:
    result = invoke(name, "-h")
    assert result.exit_code == 0 and result.stdout.startswith("Usage: ")


def test_subcommand_of_config_has_short_help() -> None:
    assert invoke("config", "show", "-h").stdout.startswith("Usage: cli config show")  # CliRunner names it cli


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: a[0])
def test_every_read_command_prints_json_with_a_schema_version(args: tuple[str, ...]) -> None:
    result = invoke(*args, "--json")
    assert result.exit_code in (0, 1), result.output  # doctor exits 1 here: no Slurm, no daemon
    assert json.loads(result.stdout)["schema_version"] == 1


def test_help_does_not_load_heavy_libraries() -> None:
    code = ("import sys; from compass_slurm.cli import cli; "
            "sys.argv = ['compass', '-h']\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('rich', 'numpy', 'sqlalchemy', 'matplotlib', 'scipy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]"


def test_the_installed_script_reports_errors_without_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run([str(COMPASS), "explain", "5", "--db", f"sqlite:///{tmp_path / 'no.db'}"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("compass: error: no decision log at")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [("explain", b"\x01\xff"), ("decisions", "--job", b"\xff"),
                                  ("report", "--output", b"r-\xff.txt")])
def test_an_argument_not_in_utf8_is_named_before_the_command_runs(tmp_path: Path, args: tuple) -> None:
    here = tmp_path / "here"
    here.mkdir()
    done = subprocess.run([str(COMPASS), *args, "--db", f"sqlite:///{here / 'no.db'}"], capture_output=True,
                          text=True, cwd=here)
    bad = next(arg for arg in args if isinstance(arg, bytes))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [f"compass: error: argument {bad!r} is not UTF-8 text",
                                        "hint: type it in UTF-8 (check the terminal's and the locale's encoding)"]
    assert not any(here.iterdir())  # nothing written


def test_doctor_reports_what_the_submit_hook_sees(tmp_path: Path, monkeypatch) -> None:
    import time

    from compass_slurm.config import Config
    from compass_slurm.submit.hook import write_config

    hook, anchors = tmp_path / "hook.conf", tmp_path / "anchors"
    monkeypatch.setenv("COMPASS_HOOK_CONFIG", str(hook))
    check = lambda: {c["name"]: c for c in json.loads(invoke("doctor", "--json").stdout)["checks"]}[  # noqa: E731
        "submit hook"]
    assert check()["ok"] and "no hook config at" in check()["detail"]
    write_config(Config(anchors=str(anchors), hook_config=str(hook)))
    anchors.write_text(f"# compass-anchors v1 generated={int(time.time())} policy=compass cycle=1\n")
    assert check()["ok"] and "GPU jobs submitted now are managed" in check()["detail"]
    hook.write_text(hook.read_text().replace("lease = 60", "lease = soon"))
    found = check()
    assert not found["ok"] and "line 4: lease must be a number of seconds, got soon" in found["detail"]
    assert "the hook leaves every GPU job to Slurm" in found["detail"] and "start the daemon" in found["hint"]
    write_config(Config(anchors=str(tmp_path), hook_config=str(hook)))  # a directory: unreadable
    assert not check()["ok"] and "unreadable: Is a directory" in check()["detail"]


@pytest.mark.parametrize("setting, value", [("migratable", "always"), ("interactive", "yes"), ("queue", "easy")])
def test_word_settings_name_their_choices(isolated: Path, setting: str, value: str) -> None:
    isolated.write_text(f'[compass]\n{setting} = "{value}"\n')
    result = invoke("config", "show")
    assert result.exit_code == 2 and f"{setting} = '{value}'" in result.stderr and "is not one of" in result.stderr


def doctor_on_socket(tmp_path: Path, monkeypatch, answer: dict) -> dict:
    """Doctor's daemon socket check, the daemon's ping answering ``answer``."""
    from compass_slurm.service.control import ControlServer

    socket = tmp_path / "compass.sock"
    monkeypatch.setenv("COMPASS_SOCKET", str(socket))
    server = ControlServer(socket, {"ping": lambda doc, peer: answer})
    server.start()
    try:
        return {c["name"]: c for c in json.loads(invoke("doctor", "--json").stdout)["checks"]}["daemon socket"]
    finally:
        server.stop()


@pytest.mark.parametrize("role", ["leader", "standby", "standby, no leader", "standby, a leader long silent"])
def test_doctor_says_the_daemons_role(tmp_path: Path, monkeypatch, role: str) -> None:
    """Its socket's ping says whether it leads or stands by, and who leads (service/leader.py); a leader whose last
    renewal is far past its lease may be gone."""
    renewed = datetime.now(UTC) - timedelta(seconds=100 if role.endswith("silent") else 5)
    leader = None if role.endswith("no leader") else {"host": "ctl1", "pid": 4242, "token": 3,
                                                        "since": "2026-12-04T02:00:00+00:00",
                                                        "renewed": renewed.isoformat(), "lease_s": 10.0}
    answer = {"policy": "compass-easy", "cycle": 9, "role": role.split(",")[0], "leader": leader}
    check = doctor_on_socket(tmp_path, monkeypatch, answer)
    detail = check["detail"]
    if role == "leader":
        assert check["ok"] and detail.endswith("(policy compass-easy, cycle 9); it leads, token 3"), detail
    elif role.endswith("silent"):
        assert check["level"] == "warn" and detail.endswith("but renewed its lease last 100 s ago (lease: 10 s): it "
                                                            "may be gone"), check
    elif leader is not None:
        assert check["ok"] and detail.endswith("it stands by: ctl1 pid 4242 leads (since 2026-12-04T02:00:00+00:00)")
    else:
        assert check["level"] == "warn" and "stands by, and no daemon leads" in detail, check


def test_doctor_names_the_held_jobs_the_daemon_cannot_account_for(tmp_path: Path, monkeypatch) -> None:
    """A daemon restarted while its log cannot be read, with no note of its requeues, leaves the held jobs that may
    be its requeues held (an admin may have held them): doctor fails and names them."""
    answer = {"policy": "compass-easy", "cycle": 9, "role": "leader", "leader": None, "held_unknown": ["7", "12"]}
    check = doctor_on_socket(tmp_path, monkeypatch, answer)
    assert not check["ok"] and "held jobs 7,12 may be its requeues" in check["detail"], check
    assert check["hint"].startswith("release each one no admin held (scontrol release JOB)")


def test_status_json_says_who_leads(tmp_path: Path, monkeypatch) -> None:
    from compass_slurm.service.leader import Leadership

    url = f"sqlite:///{tmp_path / 'log.db'}"
    Store.open(url).close()
    monkeypatch.setenv("COMPASS_DB", url)
    assert json_of("status", "--snapshot", str(MIXED))["leader"] is None  # no daemon ever led
    lead = Leadership(url, 10.0, host="ctl1", pid=4242)
    lead.step()
    doc = json_of("status", "--snapshot", str(MIXED))["leader"]
    assert (doc["host"], doc["pid"], doc["token"]) == ("ctl1", 4242, 1) and doc["since"] and doc["renewed"]
    assert "leader: ctl1 pid 4242 since" in invoke("status", "--snapshot", str(MIXED), env={"COLUMNS": "200"}).stdout
    lead.close()  # resigned: no one leads
    assert json_of("status", "--snapshot", str(MIXED))["leader"] is None


@pytest.mark.parametrize(("args", "error", "command"), [
    (["report", "--since", "xyz"], "Invalid value for '--since': invalid time 'xyz'", "compass report"),
    (["simulate", "--bogus"], "No such option '--bogus'.", "compass simulate"),
    (["bogus"], "No such command 'bogus'.", "compass"),
    (["explain"], "Missing argument 'JOBID'.", "compass explain"),
])
def test_a_usage_error_is_one_line_and_a_hint_as_every_error(args, error, command):
    """click's own errors (a bad option or value) read as ours: no usage block, the command's --help as the hint."""
    done = subprocess.run([sys.executable, "-c", "from compass_slurm.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=60)
    first, hint = done.stderr.splitlines()
    assert (done.returncode, done.stdout) == (2, "")
    assert first.startswith(f"compass: error: {error}") and hint == f"hint: see '{command} --help'"


@pytest.mark.parametrize("args", [("decisions", "--db", ""), ("report", "--db", ""), ("status", "--snapshot", ""),
                                  ("daemon", "--once", "--snapshot", ""), ("daemon", "--once", "--db", "")])
def test_an_empty_log_or_snapshot_option_is_an_error_not_the_default(args) -> None:
    """``--db "$LOG"`` with LOG unset would read (or write) the default log: said instead, naming the option."""
    result = invoke(*args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.splitlines() == [f"compass: error: {args[-2]} '' is empty",
                                          f"hint: give a value, or leave {args[-2]} out for its default"]


def test_output_that_cannot_be_written_is_one_line_saying_so() -> None:
    """stdout on a full disk (here /dev/full) has no file name to name: the message says it is the output."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([str(COMPASS), "policies"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "compass: error: cannot write the output: No space left on device",
        "hint: check the free space where the output goes, or send it elsewhere"]


def test_doctor_names_the_gpu_nodes_left_to_slurm(monkeypatch, isolated: Path) -> None:
    """Nodes compass does not place on are said (info); a daemon with no node to place on fails the check."""
    from dataclasses import replace

    from compass_slurm.cli.doctor import Doctor, Failed, Info
    from compass_slurm.config import Config
    from compass_slurm.slurm import snapshot

    state = snapshot.load(MIXED)
    doctor = Doctor(None)
    doctor.config, doctor.state = Config(), state
    assert doctor.gpu_source().endswith("22/128 GPUs in use")
    doctor.state = replace(state, nodes=tuple(replace(n, shards=4) if n.name in ("node03", "node04") else n
                                              for n in state.nodes))
    with pytest.raises(Info) as said:
        doctor.gpu_source()
    assert str(said.value).endswith("; node[03-04] left to Slurm (gres/shard, several GPU types or more than "
                                    "1024 GPUs)") and type(said.value) is Info
    doctor.state = replace(state, nodes=tuple(replace(n, shards=4) for n in state.nodes))
    with pytest.raises(Failed) as failed:
        doctor.gpu_source()
    assert type(failed.value) is Failed and "no GPU node compass places on in all partitions; node[01-16] left" \
        in str(failed.value)
    doctor.state, doctor.config = state, replace(Config(), partitions=("cpu",))
    with pytest.raises(Failed, match="no GPU node compass places on in cpu$"):
        doctor.gpu_source()
