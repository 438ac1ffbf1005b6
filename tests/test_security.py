"""The static half of the security review (docs/security.md): no shell anywhere, argument lists only,
and no unchecked job id, node name, partition or GRES type ever reaches a Slurm command line.

The control socket's permissions and SO_PEERCRED checks are tested in tests/test_control.py.
"""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest

from compass_slurm.slurm import names
from compass_slurm.slurm.backend import DryRunBackend
from compass_slurm.slurm.cli_backend import CliBackend, run_process
from compass_slurm.slurm.errors import SlurmNameError

REPO = Path(__file__).resolve().parents[1]
#: calls that always go through /bin/sh
SHELL_CALLS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"),
               ("asyncio", "create_subprocess_shell")}
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}


def python_sources() -> list[Path]:
    """Every Python file of the package and every Python script in scripts/ (found by its #! line)."""
    scripts = [p for p in (REPO / "scripts").iterdir()
               if p.is_file() and (p.suffix == ".py" or p.read_bytes()[:64].split(b"\n")[0].find(b"python") >= 0)]
    return sorted((REPO / "compass_slurm").rglob("*.py")) + sorted(scripts)


def _imports(tree: ast.AST) -> dict[str, tuple[str, ...]]:
    """Local name -> what it names: ``import os as o`` gives o -> (os,), ``from os import system`` system -> (os, system)."""
    found: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found[alias.asname or alias.name] = (alias.name,)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                found[alias.asname or alias.name] = (node.module, alias.name)
    return found


def _callee(func: ast.expr, imports: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The dotted name a call resolves to through the module's imports, e.g. ('subprocess', 'run')."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.insert(0, func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return ()
    return (*imports.get(func.id, (func.id,)), *parts)


def _calls(path: Path) -> list[tuple[ast.Call, tuple[str, ...], list[ast.AST]]]:
    """Every call in a file with its resolved callee and the chain of nodes enclosing it."""
    tree = ast.parse(path.read_text(), str(path))
    imports = _imports(tree)
    out = []

    def visit(node: ast.AST, parents: list[ast.AST]) -> None:
        if isinstance(node, ast.Call):
            out.append((node, _callee(node.func, imports), parents))
        for child in ast.iter_child_nodes(node):
            visit(child, [*parents, node])

    visit(tree, [])
    return out


def test_the_scan_sees_the_code():
    sources = python_sources()
    assert REPO / "compass_slurm" / "slurm" / "cli_backend.py" in sources
    assert REPO / "scripts" / "dev-cluster" in sources
    assert any(callee == ("subprocess", "run") for call, callee, _ in _calls(REPO / "compass_slurm/slurm/cli_backend.py"))


def test_no_subprocess_goes_through_a_shell():
    offences = []
    for path in python_sources():
        for call, callee, _ in _calls(path):
            where = f"{path.relative_to(REPO)}:{call.lineno}"
            if callee[-2:] in SHELL_CALLS or callee in SHELL_CALLS:
                offences.append(f"{where}: {'.'.join(callee)}")
            for keyword in call.keywords:
                if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant) and keyword.value.value is False):
                    offences.append(f"{where}: shell={ast.unparse(keyword.value)}")
    assert offences == []


def _is_list_argument(arg: ast.expr, parents: list[ast.AST]) -> bool:
    """A list display, or a parameter of the enclosing function annotated as a list."""
    if isinstance(arg, (ast.List, ast.ListComp)):
        return True
    if not isinstance(arg, ast.Name):
        return False
    function = next((p for p in reversed(parents) if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if function is None:
        return False
    params = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
    return any(p.arg == arg.id and p.annotation is not None and ast.unparse(p.annotation).startswith("list[")
               for p in params)


@pytest.mark.parametrize("package", ["compass_slurm/slurm", "compass_slurm"])
def test_every_subprocess_gets_an_argument_list(package):
    seen = []
    for path in sorted((REPO / package).rglob("*.py")):
        for call, callee, parents in _calls(path):
            if len(callee) == 2 and callee[0] == "subprocess" and callee[1] in SUBPROCESS_CALLS:
                args = call.args[:1] or [k.value for k in call.keywords if k.arg == "args"]
                seen.append((f"{path.relative_to(REPO)}:{call.lineno}", bool(args) and _is_list_argument(args[0], parents)))
    assert seen, f"no subprocess call found under {package}: the scan is broken"
    assert [where for where, ok in seen if not ok] == []


def test_arguments_reach_the_program_verbatim():
    # were a shell involved, $(id) would be replaced and ';' would end the command
    code, out, _ = run_process(["echo", "$(id);x", "`id`", "a b"], timeout=10)
    assert (code, out) == (0, "$(id);x `id` a b\n")


class Recorder:
    """A CliBackend runner that records every command instead of running it."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        self.calls.append(argv)
        return 0, "PENDING\n", ""


INJECTIONS = ["node1;rm -rf /", "$(id)", "`id`", "node1\nnode2", "node1 Priority=1", "node1\tx", "a" * 65,
              "node[1-2]", "n1,n2", "x=1", "../etc", "", "node1\x00", "-n", "n|cat", "n&&id", "n>f", "ünïcode"]
BAD_JOB_IDS = ["1;rm -rf /", "$(id)", "1 2", "1\n2", "0", "-1", "1_[1-3]", "1" * 11, "", "1=1", "１２"]


def _actions(job: str, node: str, gpu_type: str | None = None):
    """Every backend method that builds a command line, with one job id, one node name and a GRES type."""
    return [
        lambda b: b.release(job),
        lambda b: b.requeue_hold(job),
        lambda b: b.renew_lease([job], 60),
        lambda b: b.job_state(job),
        lambda b: b.set_nodes(job, [node], gpus_per_node=2, gpu_type=gpu_type, start_now=True),
        lambda b: b.set_nodes(job, ["node01", node], gpus_per_node=2, gpu_type=gpu_type),
        lambda b: b.migrate(job, [node, "node02"], gpus_per_node=2, gpu_type=gpu_type),
    ]


def _backends(recorder: Recorder) -> list:
    dry = DryRunBackend(CliBackend(runner=recorder), out=io.StringIO())
    return [CliBackend(runner=recorder), dry]


@pytest.mark.parametrize("bad", BAD_JOB_IDS)
def test_bad_job_ids_are_refused_before_any_command(bad):
    recorder = Recorder()
    for backend in _backends(recorder):
        for action in _actions(bad, "node01"):
            with pytest.raises(SlurmNameError):
                action(backend)
        assert getattr(backend, "commands", []) == []
    assert recorder.calls == []


@pytest.mark.parametrize("bad", INJECTIONS)
def test_bad_node_names_and_gres_types_are_refused_before_any_command(bad):
    recorder = Recorder()
    for backend in _backends(recorder):
        node_actions = _actions("42", bad)[-3:]
        type_actions = _actions("42", "node03", gpu_type=bad)[-3:] if bad else []
        for action in [*node_actions, *type_actions]:
            with pytest.raises(SlurmNameError):
                action(backend)
        assert getattr(backend, "commands", []) == []
    assert recorder.calls == []


def test_good_names_do_reach_the_command_line():
    recorder = Recorder()
    backend = CliBackend(runner=recorder)
    backend.set_nodes("42", ["node01", "node02"], gpus_per_node=2, gpu_type="a100", start_now=True)
    assert recorder.calls == [
        ["scontrol", "update", "JobId=42", "ReqNodeList=node[01-02]", "NumNodes=2", "TresPerJob=",
         "TresPerNode=gres:gpu:a100:2", "StartTime=now"],
    ]


@pytest.mark.parametrize("bad", INJECTIONS)
def test_partition_names_are_checked_too(bad):
    with pytest.raises(SlurmNameError, match="not a valid Slurm partition name"):
        names.partition(bad)
