"""Fuzzing what users hand us: trace CSVs, sacct dumps, replay event streams and the config (file and env)."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from fuzzing import RAW_TOKENS, clear, garbage, json_values, target, to_json
from hypothesis import strategies as st

from compass_slurm.config import Config, ConfigError, load_config
from compass_slurm.engine.replay import EventError, parse_events
from compass_slurm.sim.workloads import REQUIRED, TraceError, load, load_csv, load_sacct

# -- trace CSV ------------------------------------------------------------------------------------------

cell = garbage | st.integers(-5, 10**6).map(str) | st.floats(0, 1e9).map(repr) | st.sampled_from(["", " ", '"', '""'])


@st.composite
def csv_traces(draw: st.DrawFn) -> str:
    header = draw(st.permutations([*REQUIRED, "num_nodes", "max_gpus_per_node", "cluster"]))
    header = header[: draw(st.integers(len(REQUIRED) - 1, len(header)))]
    rows = draw(st.lists(st.lists(cell, min_size=len(header) - 2, max_size=len(header) + 1), max_size=6))
    lines = [",".join(header), *(",".join(row) for row in rows)]
    return draw(st.sampled_from(["\n", "\r\n"])).join(lines)


#: a field past csv's size limit (131072 characters)
HUGE_FIELD = f"{','.join(REQUIRED)}\n1,{'9' * 200_000},1,1\n"


@target("trace CSV", csv_traces() | st.text(max_size=200) | st.just(HUGE_FIELD), st.booleans(),
        st.none() | st.sampled_from(["c1", ""]))
def test_trace_csv_loads_or_raises_a_trace_error(text, skip_bad, cluster):
    trace = clear(lambda: load_csv(text, skip_bad=skip_bad, cluster=cluster), TraceError)
    if isinstance(trace, TraceError):
        assert "line " in str(trace) or "column" in str(trace), trace
    else:
        assert all(r.gpus >= 1 and r.submit >= 0 and r.duration >= 0 for r in trace.records)
        assert [r.submit for r in trace.records] == sorted(r.submit for r in trace.records)


# -- sacct --parsable2 -----------------------------------------------------------------------------------

SACCT_HEADER = "JobIDRaw|Submit|Start|End|NNodes|AllocTRES"
# mostly plausible cells, so that rows get as far as the arithmetic on times; garbage in one cell in four
def _cells(*plausible: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(plausible), st.sampled_from(plausible), st.sampled_from(plausible), garbage)


times = _cells("2026-04-01T10:00:00", "2026-04-01T10:05:00", "2026-04-02T00:00:00", "Unknown", "None", "",
               "2026-04-01T10:00:00+02:00", "2026-04-01T08:00:00Z", "2026-04-01", "9999-12-31T23:59:59")
tres = _cells("cpu=1,gres/gpu=4", "gres/gpu:a100=2,gres/gpu:v100=1", "cpu=2,mem=8G", "gres/gpu=0", "gres/gpu=x", "",
              "billing=1,gres/gpu=99999999999999999999")
sacct_rows = st.tuples(_cells("1", "2.batch", "3_4", "5.0"), times, times, times, _cells("1", "2", "0", "-1"), tres)


@target("sacct dump", st.lists(sacct_rows, max_size=6), st.booleans(), st.sampled_from([SACCT_HEADER, "JobID|Submit"]))
def test_sacct_dump_loads_or_raises_a_trace_error(rows, skip_bad, header):
    text = "\n".join([header, *("|".join(row) for row in rows)])
    trace = clear(lambda: load_sacct(text, skip_bad=skip_bad), TraceError)
    if not isinstance(trace, TraceError):
        assert all(r.submit >= 0 and r.duration >= 0 and r.gpus >= 1 for r in trace.records)


@target("trace CSV", st.binary(max_size=64))
def test_any_file_given_as_trace_loads_or_raises(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("trace") / "trace.csv"
    path.write_bytes(data)
    clear(lambda: load(path), TraceError)


# -- replay events ---------------------------------------------------------------------------------------

event_docs = st.fixed_dictionaries(
    {"t": st.floats(0, 1e6) | json_values, "event": st.sampled_from(["arrive", "depart"]) | json_values,
     "job": st.text(min_size=1, max_size=5) | json_values},
    optional={"instances": st.integers(-2, 10) | json_values, "gpus": st.integers(-2, 10) | json_values,
              "migratable": st.booleans() | json_values, "distinct_nodes": st.booleans() | json_values},
)
event_lines = st.one_of(
    event_docs.map(to_json),
    st.sampled_from(range(len(RAW_TOKENS))).map(lambda i: f'{{"t": {RAW_TOKENS[i]}, "event": "depart", "job": "a"}}'),
    st.sampled_from(RAW_TOKENS),
    garbage,
    st.just(""),
)


@target("replay events", st.lists(event_lines, max_size=8), st.integers(1, 16))
def test_replay_events_parse_or_raise_an_event_error(lines, max_gpus):
    events = clear(lambda: list(parse_events(lines, max_gpus)), EventError)
    if isinstance(events, EventError):
        assert str(events).startswith(f"line {events.line}:")
    else:
        assert all(e.job is None or 1 <= e.job.gpus <= max_gpus for e in events)


# -- config ------------------------------------------------------------------------------------------------

SETTINGS = [name for name in Config().as_dict()]


def _toml(value: object) -> str:
    """A TOML literal; None stands for something TOML cannot hold (written as a bare word)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value) if isinstance(value, str) else str(value) if value is not None else "bare"


toml_values = st.recursive(
    st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=12) | st.none(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=2),
    max_leaves=6,
)
setting_names = st.sampled_from(SETTINGS) | st.sampled_from(["compass", "unknown", "Interval"])


@st.composite
def config_files(draw: st.DrawFn) -> str:
    body = "\n".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in draw(st.dictionaries(setting_names, toml_values,
                                                                                        max_size=4)).items())
    layout = draw(st.sampled_from(["top", "table", "garbage"]))
    if layout == "table":
        return f"[compass]\n{body}\n"
    if layout == "garbage":
        return draw(st.text(alphabet=string.printable, max_size=80))
    return body


env_values = st.dictionaries(
    st.sampled_from([f"COMPASS_{name.upper()}" for name in SETTINGS]),
    garbage | st.sampled_from(["1", "0.5", "-1", "nan", "inf", "1e999", "9" * 5000, "a,b", " , "]),
    max_size=4,
)


@target("config", config_files(), env_values, st.booleans())
def test_config_loads_or_raises_a_config_error(tmp_path_factory, text, env, named):
    path = tmp_path_factory.mktemp("config") / "config.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    config = clear(lambda: load_config(path if named else None, environ={**env, "COMPASS_CONFIG": str(path)}),
                   ConfigError)
    if isinstance(config, Config):
        assert set(config.sources) == set(SETTINGS)


@target("config", st.dictionaries(st.sampled_from(SETTINGS) | st.text(max_size=5), toml_values, max_size=3))
def test_config_flags_are_checked_like_the_file(flags):
    clear(lambda: load_config(Path("/nonexistent/compass.toml"), flags=flags, environ={}), ConfigError)


@pytest.mark.fuzz(parser="config")
def test_a_missing_named_config_file_is_a_config_error():
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/compass.toml", environ={})


@pytest.mark.fuzz(parser="config")
def test_an_empty_config_file_name_is_a_config_error_not_the_default_file():
    with pytest.raises(ConfigError, match="an empty config file name"):
        load_config("", environ={"COMPASS_CONFIG": "/nonexistent/compass.toml"})
