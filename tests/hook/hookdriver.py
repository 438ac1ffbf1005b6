"""Runs etc/slurm/job_submit.lua in a real Lua 5.1 interpreter (tests/hook/driver.lua) against a fake
``slurm`` table: the hook's logic, one subprocess per case. The real slurmctld runs it in
tests/integration/test_submit_hook.py."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "etc" / "slurm" / "job_submit.lua"
DRIVER = Path(__file__).resolve().parent / "driver.lua"
NOW = 1_800_000_000
BATCH = {"script": "#!/bin/sh\nsleep 1\n", "name": "job", "user_id": 1000, "begin_time": 0,
         "priority": 4294967294, "shared": 65534, "requeue": 65534, "het_job_offset": 4294967294}


@dataclass
class Call:
    """One submission as the hook saw it: Slurm's return code, the fields it set, its log lines."""

    rc: int
    opened: int
    sets: dict[str, str] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)


def lua(value: Any) -> str:
    """A Python value as Lua source (None is nil, False deletes a file in ``files``)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{lua(k)}] = {lua(v)}" for k, v in value.items()) + "}"
    return "{" + ", ".join(lua(v) for v in value) + "}"


class Hook:
    """The hook with a config and an anchors file in ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config_path = root / "hook.conf"
        self.anchors_path = root / "anchors"

    def config(self, **overrides: Any) -> str:
        settings = {"anchors": str(self.anchors_path), "staleness": 6, "lease": 60, "interactive": "managed",
                    "interactive_lease": 4, "marker": "compass", **overrides}
        return "".join(f"{k} = {v}\n" for k, v in settings.items() if v is not None)

    @staticmethod
    def anchors(generated: int = NOW) -> str:
        return f"# compass-anchors v1 generated={generated} policy=compass cycle=3\n1 node01\n8 node02\n"

    def run(self, calls: list[dict[str, Any]], files: dict[str, Any] | None = None) -> list[Call]:
        """Submissions in one Lua state (as in slurmctld); each call: job fields, optional now, files, parts."""
        if files is None:
            files = {str(self.config_path): self.config(), str(self.anchors_path): self.anchors()}
        case = {"env": {"COMPASS_HOOK_CONFIG": str(self.config_path)}, "now": NOW, "files": files,
                "calls": [{**c, "job": {**BATCH, **c["job"]}} for c in calls]}
        case_file = self.root / "case.lua"
        case_file.write_text("return " + lua(case) + "\n")
        done = subprocess.run([LUA, str(DRIVER), str(HOOK), str(case_file)], capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done.stderr
        out: list[Call] = []
        for line in done.stdout.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "call":
                words = rest.split()
                out.append(Call(rc=int(words[2]), opened=int(words[4])))
            elif kind == "set":
                key, _, value = rest.partition(" ")
                out[-1].sets[key] = _unquote(value)
            elif kind == "log":
                out[-1].logs.append(_unquote(rest))
        assert len(out) == len(calls), done.stdout
        return out

    def one(self, **job: Any) -> Call:
        return self.run([{"job": job}])[0]


def _unquote(text: str) -> str:
    assert text.startswith('"') and text.endswith('"'), text
    return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")


LUA = shutil.which("lua5.1") or ""
