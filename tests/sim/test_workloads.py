"""Trace loaders: CSV (errors with line numbers, --skip-bad), sacct dumps, and the GPU-count mapping."""

from __future__ import annotations

import pytest

from compass_slurm.sim.synthetic import MIXES, generate
from compass_slurm.engine.shape import Shape
from compass_slurm.sim.workloads import (
    TraceError,
    TraceRecord,
    instance_shape,
    load,
    load_csv,
    load_sacct,
    parse_window,
    select,
    to_jobs,
)

GOOD = """job_id,submit_time_s,duration_s,num_gpus,extra
j1,10,100,1,x
j2,0,50.5,16,y
"""


def test_csv_loads_in_submit_order_and_ignores_extra_columns():
    trace = load_csv(GOOD)
    assert trace.records == (TraceRecord("j2", 0, 50.5, 16), TraceRecord("j1", 10, 100, 1))
    assert trace.skipped == ()


@pytest.mark.parametrize(
    "row, why",
    [
        ("j3,5,-1,2", "duration_s '-1' must be a number of seconds from 0 to 1e+11"),
        ("j3,1e308,10,2", "submit_time_s '1e308' must be a number of seconds from 0 to 1e+11"),
        ("j3,5,abc,2", "duration_s 'abc' is not a number"),
        ("j3,5,10", "expected at least 4 fields, got 3"),
        ("j3,5,10,0", "num_gpus '0' must be at least 1"),
        ("j3,5,10,2.5", "num_gpus '2.5' is not a whole number"),
        (",5,10,2", "job_id is empty"),
        ("j3,nan,10,2", "submit_time_s 'nan' must be a number of seconds from 0 to 1e+11"),
    ],
)
def test_malformed_row_names_its_line(row, why):
    text = GOOD + row + "\n"
    with pytest.raises(TraceError) as err:
        load_csv(text, name="t.csv")
    assert str(err.value) == f"t.csv: line 4: {why} (use --skip-bad to skip malformed rows)"
    skipped = load_csv(text, skip_bad=True)
    assert len(skipped.records) == 2 and skipped.skipped == (f"line 4: {why}",)


def test_missing_column_and_cluster_filter():
    with pytest.raises(TraceError, match="line 1: missing column.*num_gpus"):
        load_csv("job_id,submit_time_s,duration_s\n1,0,1\n")
    itp = "job_id,cluster,submit_time_s,duration_s,num_gpus\na,c1,0,600,8\nb,c2,1,600,1\nc,c1,2,600,2\n"
    assert [r.id for r in load_csv(itp, cluster="c1").records] == ["a", "c"]
    with pytest.raises(TraceError, match="no 'cluster' column"):
        load_csv(GOOD, cluster="c1")


def test_optional_shape_columns():
    text = "job_id,submit_time_s,duration_s,num_gpus,num_nodes,max_gpus_per_node\na,0,1,12,12,1\nb,0,1,2,,\n"
    a, b = load_csv(text).records
    assert (a.nodes, a.gpus_per_node, b.nodes, b.gpus_per_node) == (12, 1, None, None)


def test_unreadable_file(tmp_path):
    with pytest.raises(TraceError, match="cannot read trace"):
        load(tmp_path / "absent.csv")


# Recorded from `sacct --allusers --allocations --parsable2
#   --format=JobIDRaw,Submit,Start,End,NNodes,AllocTRES` (steps included, as without --allocations).
SACCT = """JobIDRaw|Submit|Start|End|NNodes|AllocTRES
1001|2026-04-01T10:00:00|2026-04-01T10:05:00|2026-04-01T11:05:00|1|billing=4,cpu=4,gres/gpu=2,mem=16G,node=1
1001.batch|2026-04-01T10:05:00|2026-04-01T10:05:00|2026-04-01T11:05:00|1|cpu=4,gres/gpu=2,mem=16G,node=1
1001.extern|2026-04-01T10:05:00|2026-04-01T10:05:00|2026-04-01T11:05:00|1|billing=4,cpu=4,gres/gpu=2,mem=16G,node=1
1002|2026-04-01T10:30:00|2026-04-01T10:31:00|2026-04-01T10:41:00|2|billing=16,cpu=16,gres/gpu:a100=16,mem=128G,node=2
1002.0|2026-04-01T10:31:00|2026-04-01T10:31:00|2026-04-01T10:41:00|2|cpu=16,gres/gpu:a100=16,mem=128G,node=2
1003|2026-04-01T11:00:00|2026-04-01T11:00:05|2026-04-01T11:00:10|1|billing=1,cpu=1,mem=1G,node=1
1004|2026-04-01T11:10:00|Unknown|Unknown|1|
1005_3|2026-04-01T12:00:00|2026-04-01T12:00:00|Unknown|1|billing=8,cpu=8,gres/gpu=8,node=1
1006|2026-04-01T12:30:00|2026-04-01T12:31:00|2026-04-01T12:41:00|2|billing=8,cpu=8,gres/gpu=3,gres/gpu:h100=3,node=2
"""


def test_sacct_dump_becomes_a_trace(tmp_path):
    path = tmp_path / "month.sacct"
    path.write_text(SACCT)
    trace = load(path)  # told apart from CSV by its header
    assert trace.records == (
        TraceRecord("1001", 0, 3600, 2, 1, 2),
        TraceRecord("1002", 1800, 600, 16, 2, 8),
        TraceRecord("1006", 9000, 600, 3, 2, None),  # gres/gpu wins over the typed count; 3 on 2 nodes
    )


def test_sacct_bad_rows_name_their_line():
    bad = SACCT + "1007|yesterday|2026-04-01T12:31:00|2026-04-01T12:41:00|1|gres/gpu=1\n"
    with pytest.raises(TraceError, match=r"line 11: Submit 'yesterday' is not a date-time"):
        load_sacct(bad)
    assert load_sacct(bad, skip_bad=True).skipped == ("line 11: Submit 'yesterday' is not a date-time",)
    with pytest.raises(TraceError, match="line 1: missing sacct field.*AllocTRES"):
        load_sacct("JobID|Submit|Start|End|NNodes\n")


@pytest.mark.parametrize(
    "gpus, nodes, per_node, shape",
    [
        (1, None, None, Shape(1, 1, False, "single")),
        (4, 2, 2, Shape(1, 4, False, "single")),  # where it ran, not what it asked for
        (8, None, None, Shape(1, 8, False, "single")),
        (24, None, None, Shape(3, 8, False, "whole_nodes")),
        (16, 4, 4, Shape(2, 8, False, "whole_nodes")),
        (12, 12, 1, Shape(12, 1, False, "per_node")),  # recorded on 12 nodes: no demand for 12 distinct
        (12, 1, 12, Shape(2, 6, True, "divisor")),  # a 12-GPU 1-node row: what the daemon asks Slurm for
        (12, None, None, Shape(2, 6, True, "divisor")),
        (20, 2, 10, Shape(4, 5, True, "divisor")),  # the recorded 10 per node does not fit an 8-GPU node
        (11, None, None, Shape(11, 1, True, "divisor")),
    ],
)
def test_instance_shape(gpus, nodes, per_node, shape):
    assert instance_shape(TraceRecord("x", 0, 1, gpus, nodes, per_node), 8) == shape


def test_to_jobs_counts_rules_and_rejects_duplicate_ids():
    jobs, rules = to_jobs([TraceRecord("a", 0, 1, 16), TraceRecord("b", 0, 1, 12)], 8)
    assert [(j.job.instances, j.job.gpus) for j in jobs] == [(2, 8), (2, 6)]
    assert rules == {"whole_nodes": 1, "divisor": 1}
    with pytest.raises(TraceError, match="job id a appears twice"):
        to_jobs([TraceRecord("a", 0, 1, 1), TraceRecord("a", 5, 1, 1)], 8)


def test_window_and_limit():
    records = [TraceRecord(str(t), t, 1, 1) for t in (0, 3600, 7200, 90000)]
    assert parse_window("1h:1d") == (3600, 86400)
    assert parse_window(":2h") == (0, 7200)
    assert parse_window("1d:") == (86400, float("inf"))
    assert [r.id for r in select(records, parse_window("1h:1d"), None)] == ["3600", "7200"]
    assert [r.id for r in select(records, None, 2)] == ["0", "3600"]
    for bad in ("5", "2h:1h", "x:1h", "-1:5"):
        with pytest.raises(ValueError, match="bad window"):
            parse_window(bad)


def test_synthetic_is_seeded_and_follows_its_mix():
    a, b = generate("philly", 3000, seed=1), generate("philly", 3000, seed=1)
    assert a == b and a != generate("philly", 3000, seed=2)
    ones = sum(r.gpus == 1 for r in a.records) / len(a.records)
    assert ones == pytest.approx(0.8665, abs=0.03)
    venus = generate("venus", 5000, seed=0).records
    instances = sum(r.nodes for r in venus)
    eights = sum(r.nodes for r in venus if r.gpus_per_node == 8)
    assert eights / instances == pytest.approx(0.5244, abs=0.04)  # the paper's 8-GPU instance share
    assert set(MIXES) == {"venus", "gfs", "philly"}
    with pytest.raises(ValueError, match="unknown synthetic workload 'helios'"):
        generate("helios", 10, 0)


def test_real_philly_trace_maps_as_documented(philly):
    trace = load(philly)
    assert len(trace.records) == 111_549 and not trace.skipped
    _, rules = to_jobs(trace.records, 8)
    # 59 odd sizes in all; the ones above 8 GPUs use the recorded shape (e.g. 12 x 1)
    assert rules == {"single": 110_390, "whole_nodes": 1_145, "per_node": 14}


def test_a_time_limit_column_becomes_the_jobs_run_time_estimate():
    from compass_slurm.sim.workloads import load_csv, to_jobs

    trace = load_csv("job_id,submit_time_s,duration_s,num_gpus,time_limit_s\na,0,50,1,120\nb,1,5,1,\n")
    jobs, _ = to_jobs(trace.records, 8)
    assert [(j.job.id, j.limit) for j in jobs] == [("a", 120.0), ("b", None)]
    with pytest.raises(ValueError, match="time_limit_s 'soon' is not a number"):
        load_csv("job_id,submit_time_s,duration_s,num_gpus,time_limit_s\na,0,50,1,soon\n")
