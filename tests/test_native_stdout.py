"""The drivers' stdout guard: native writes to fd 1 vanish, Python's own output stays on stdout."""

from __future__ import annotations

import io
import os
import sys

import scipy.optimize

from compass_slurm.engine import fragmentation
from compass_slurm.engine.fragmentation import phi_star
from compass_slurm.native_stdout import native_stdout_silenced


def test_exact_solver_output_is_kept_off_a_captured_stdout(capfd, monkeypatch):
    real_milp = scipy.optimize.milp

    def chatty_milp(*args, **kwargs):
        # What HiGHS can do from native code: write straight to file descriptor 1.
        os.write(1, b"HiGHS diagnostics\n")
        return real_milp(*args, **kwargs)

    monkeypatch.setattr(scipy.optimize, "milp", chatty_milp)
    fragmentation._exact_phi.cache_clear()
    print("before", flush=True)
    with native_stdout_silenced():
        # WCC fails and best-fit decreasing needs 3 nodes where only 2 exist: the MILP runs.
        assert phi_star([0, 0, 3, 2, 1, 0, 0, 0, 0], 8, 2) == 0  # sizes 4, 3, 3, 2, 2, 2
        print("python", flush=True)
    assert fragmentation._exact_phi.cache_info().misses >= 1
    print("after", flush=True)
    out, _ = capfd.readouterr()
    assert out == "before\npython\nafter\n"


def test_python_output_on_fd1_is_moved_to_a_copy_of_it():
    read_end, write_end = os.pipe()
    saved_fd, saved_stdout = os.dup(1), sys.stdout
    os.dup2(write_end, 1)
    os.close(write_end)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    try:
        with native_stdout_silenced():
            os.write(1, b"native\n")
            print("python")
        print("after")
        sys.stdout.flush()
    finally:
        sys.stdout = saved_stdout
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
    assert os.read(read_end, 1000) == b"python\nafter\n"
    os.close(read_end)
