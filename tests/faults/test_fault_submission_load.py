"""500 concurrent wrapper submissions: every job submitted exactly once, every decision logged once."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from harness import job_id, jobs_named, log_disagreements, submit, until, wrapper_env

from compass_slurm.service.store import Store

pytestmark = pytest.mark.faults

JOBS, AT_ONCE = 500, 50
STARTED = {"RUNNING", "COMPLETING", "COMPLETED"}


def test_five_hundred_concurrent_submissions(daemons, name, capsys):
    daemon = daemons(lease=300).start()
    # 50 interpreters starting at once on 2 cores need more than the 1 s default to reach the daemon;
    # this test is about exactly-once through the daemon path (the fallback has its own test)
    env = wrapper_env(daemon, COMPASS_WRAPPER_TIMEOUT="60")
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        runs = list(pool.map(lambda i: submit(env, "--gpus=1", f"--job-name={name}{i}", "--output=/dev/null",
                                              "--parsable", "--wrap", "sleep 2")[0], range(JOBS)))
    took = time.monotonic() - began
    ids = [job_id(run) for run in runs]
    assert not [run.stderr for run in runs if run.stderr]  # no fallback, no error
    assert len(set(ids)) == JOBS
    seen = until(lambda: (js := jobs_named(name)) and all(j.state in STARTED for j in js) and js, 120,
                 "every job started")
    assert sorted(j.id for j in seen) == sorted(ids)  # each name once: nothing submitted twice
    assert Counter(j.name for j in seen).most_common(1)[0][1] == 1
    assert all(j.comment == "compass" for j in seen)
    daemon.wait_cycles(1)
    with Store.open(f"sqlite:///{daemon.db}", create=False) as store:
        decided = Counter(d.job_id for d in store.decisions() if d.job_id in set(ids))
    assert set(decided) == set(ids) and set(decided.values()) == {1}  # every decision logged once
    assert log_disagreements(daemon.db, seen) == []
    with capsys.disabled():
        print(f"\n[faults] {JOBS} wrapper submissions, {AT_ONCE} at a time: {took:.1f} s "
              f"({JOBS / took:.1f}/s), all placed once")
