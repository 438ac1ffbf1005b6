"""The identity contract: a read hands back the same SlurmJob object for a job that did not change since the last
read, in every read format. The translation cache (slurm/translation_cache.py) finds kept jobs by ``map(id, jobs)``,
and so do the engine's Scheduler and policies for the jobs the daemon hands them."""

from __future__ import annotations

from compass_slurm.slurm.cli_backend import CliBackend


def same_objects_twice(backend: CliBackend) -> bool:
    """Whether two reads of the same output hand back the same objects (read_state's jobs are read_jobs')."""
    first, again = backend.read_jobs(), backend.read_jobs()
    return bool(first) and list(map(id, again)) == list(map(id, first))


def test_squeue_json_keeps_an_unchanged_job_s_object(mixed):
    assert same_objects_twice(CliBackend(runner=mixed))


def test_the_read_by_line_keeps_an_unchanged_job_s_object(mixed_by_line):
    assert same_objects_twice(CliBackend(runner=mixed_by_line, lines=True))


def test_the_narrow_read_keeps_an_unchanged_job_s_object(narrow_queue):
    assert same_objects_twice(CliBackend(runner=narrow_queue, narrow=True))
