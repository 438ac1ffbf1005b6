"""The snapshot backend: a Slurm state saved as JSON, read back without any Slurm.

``save(state, path)`` writes what ``compass snapshot save FILE`` records; a
``SnapshotBackend`` serves it to any live command given ``--snapshot FILE``.
It never changes anything: the scontrol commands it is asked for are only
recorded (and printed, like a dry run).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..atomic import write_atomic
from .backend import STDOUT, Out, RecordingBackend
from .errors import SlurmParseError
from .state import SlurmState

KIND = "compass-slurm-snapshot"
SCHEMA = 1


def dumps(state: SlurmState) -> str:
    return json.dumps({"kind": KIND, "schema": SCHEMA, "state": state.to_dict()}, indent=1, sort_keys=True)


def save(state: SlurmState, path: str | os.PathLike[str]) -> None:
    """Write atomically: a reader never sees half a snapshot; nor a file that would not load (a value Slurm's read
    gave that the loader refuses: SlurmParseError names it, and nothing is written)."""
    text = dumps(state)
    loads(text, "the state read")
    write_atomic(path, text + "\n")


def loads(text: str, source: str = "snapshot") -> SlurmState:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise SlurmParseError(f"{source}: not JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise SlurmParseError(f"{source}: not a compass Slurm snapshot (no \"kind\": \"{KIND}\")")
    if doc.get("schema") != SCHEMA:
        raise SlurmParseError(f"{source}: snapshot schema {doc.get('schema')!r}, this version reads {SCHEMA}")
    if "state" not in doc:
        raise SlurmParseError(f"{source}: not a compass Slurm snapshot (no \"state\")")
    try:
        return SlurmState.from_dict(doc["state"])
    except SlurmParseError as err:
        raise SlurmParseError(f"{source}: {err}") from None


def load(path: str | os.PathLike[str]) -> SlurmState:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise SlurmParseError(f"{path}: cannot read snapshot: {err.strerror}") from None
    except UnicodeDecodeError as err:  # JSON is UTF-8: another encoding is no snapshot of ours
        raise SlurmParseError(f"{path}: not a snapshot: not UTF-8 text (at byte {err.start})") from None
    return loads(text, str(path))


class SnapshotBackend(RecordingBackend):
    """Serves one recorded state; actions are recorded and printed, never run."""

    name = "snapshot"

    def __init__(self, state: SlurmState, out: Out = STDOUT) -> None:
        super().__init__(out)
        self.state = state

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], out: Out = STDOUT) -> SnapshotBackend:
        return cls(load(path), out)

    def read_state(self) -> SlurmState:
        return self.state

    def version(self) -> str:
        return self.state.version

    def job_state(self, job_id: str) -> str | None:
        try:
            return self.state.job(job_id).state
        except KeyError:
            return None
