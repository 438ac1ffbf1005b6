"""Held jobs as Slurm 22.05 shows them, recorded on the dev cluster (tests/data/slurm/held-22.05): job 4 requeue-held
(``scontrol requeuehold``, as a migration does), job 5 requeue-held and then held by an admin (``scontrol hold``), job 7
held by an admin while it waited. Every read takes all three as held, and no read tells a requeue the daemon made from
one an admin made (the same command, by root): a restarted daemon knows its own requeues only from its log or its own
note (service/requeue_note.py), and leaves held what neither names."""

from __future__ import annotations

from pathlib import Path

from compass_slurm.slurm import parse_json, parse_text

HELD = Path(__file__).resolve().parents[1] / "data" / "slurm" / "held-22.05"


def test_requeue_held_and_admin_held_jobs_read_as_held_by_line_and_from_json():
    by_line, _ = parse_text.job_lines((HELD / "jobs.txt").read_text(), {})
    from_json = parse_json.jobs(parse_json.load((HELD / "squeue.json").read_text(), "squeue --json"))
    for jobs in (by_line, from_json):
        assert [(j.id, j.state, j.held, j.priority) for j in jobs] == [("4", "PENDING", True, 0),
                                                                      ("5", "PENDING", True, 0),
                                                                      ("7", "PENDING", True, 0)]


def test_the_line_shows_an_admin_s_hold_on_a_requeue_as_the_requeue_alone():
    """scontrol prints a requeue's description as its reason whoever held the job since; squeue --json tells the
    admin's hold apart (JobHeldAdmin beside the description), but a requeue of the admin's own reads as the daemon's."""
    by_line, _ = parse_text.job_lines((HELD / "jobs.txt").read_text(), {})
    from_json = parse_json.jobs(parse_json.load((HELD / "squeue.json").read_text(), "squeue --json"))
    assert [j.reason for j in by_line] == ["job_requeued_in_held_state", "job_requeued_in_held_state", "JobHeldAdmin"]
    assert [j.reason for j in from_json] == ["JobHeldUser", "JobHeldAdmin", "JobHeldAdmin"]
