"""The hook's config file as ``compass daemon`` writes it, and what ``compass doctor`` reads from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from compass_slurm.config import Config
from compass_slurm.submit.hook import HookConfigError, config_text, parse_config, staleness, status, write_config

NOW = 1_800_000_000.0


def anchors(generated: float = NOW) -> str:
    return f"# compass-anchors v1 generated={int(generated)} policy=compass cycle=4\n1 node01\n"


def hooked(tmp_path: Path, **config) -> Config:
    """A config whose hook files live in tmp_path, with both written as a live daemon writes them."""
    cfg = Config(anchors=str(tmp_path / "anchors"), hook_config=str(tmp_path / "hook.conf"), **config)
    write_config(cfg)
    (tmp_path / "anchors").write_text(anchors())
    return cfg


def test_the_written_config_says_what_the_daemon_is_set_to(tmp_path: Path) -> None:
    cfg = hooked(tmp_path, interval=2, lease=90.5, interactive="unmanaged", partitions=("gpu", "a100"))
    settings = parse_config((tmp_path / "hook.conf").read_text())
    assert settings == {"anchors": str(tmp_path / "anchors"), "staleness": 6.0, "lease": 91.0,
                        "interactive": "unmanaged", "interactive_lease": 10.0, "marker": "compass",
                        "partitions": ("gpu", "a100")}
    assert staleness(Config(interval=5)) == 15 and staleness(Config(interval=5, hook_staleness=4)) == 4
    assert (tmp_path / "hook.conf").stat().st_mode & 0o777 == 0o644  # slurmctld may run as SlurmUser
    assert status(cfg.hook_config, clock=lambda: NOW + 3).anchors_age == 3


def test_partitions_empty_means_all() -> None:
    assert parse_config(config_text(Config()))["partitions"] == ()
    assert parse_config('anchors = "/a b"\nstaleness = 1.5 # comment\nlease = 2\nmarker = compass\n')["anchors"] == "/a b"


@pytest.mark.parametrize("text, message", [
    ("anchors = /x\nstaleness 6\n", "line 2: not `key = value`: staleness 6"),
    ("speed = 9\n", "line 1: unknown setting speed"),
    ("anchors = /x\nstaleness = soon\n", "line 2: staleness must be a number of seconds, got soon"),
    ("anchors = /x\nstaleness = 0x10\n", "line 2: staleness must be a number of seconds, got 0x10"),
    ("anchors = /x\nstaleness = 6\nlease = 60\n", "missing setting marker"),
    ("interactive = maybe\n", "line 1: interactive must be managed or unmanaged, got maybe"),
    ("marker = com pass\n", "line 1: marker has no usable value: com pass"),
])
def test_what_the_hook_would_reject(text: str, message: str) -> None:
    with pytest.raises(HookConfigError) as err:
        parse_config(text)
    assert str(err.value) == message


def test_status_names_each_reason_the_hook_leaves_jobs_to_slurm(tmp_path: Path) -> None:
    cfg = hooked(tmp_path)
    hook, anchors_file = Path(cfg.hook_config), tmp_path / "anchors"
    with pytest.raises(HookConfigError, match=r"anchors file .* generated 16 s ago, staleness 15 s"):
        status(cfg.hook_config, clock=lambda: NOW + 16)
    anchors_file.write_text("garbage\n")
    with pytest.raises(HookConfigError, match=r"anchors file .*/anchors: not a compass-anchors v1 file"):
        status(cfg.hook_config, clock=lambda: NOW)
    anchors_file.unlink()
    anchors_file.mkdir()
    with pytest.raises(HookConfigError, match=r"anchors file .*/anchors unreadable: Is a directory"):
        status(cfg.hook_config, clock=lambda: NOW)
    hook.write_text(hook.read_text().replace("marker = compass", "marker = other"))
    with pytest.raises(HookConfigError, match="marker = other, but the daemon manages jobs marked compass"):
        status(cfg.hook_config)
    hook.write_text("lease = soon\n")
    with pytest.raises(HookConfigError, match=r"hook.conf line 1: lease must be a number of seconds, got soon"):
        status(cfg.hook_config)
    hook.unlink()
    with pytest.raises(HookConfigError, match="No such file or directory"):
        status(cfg.hook_config)
