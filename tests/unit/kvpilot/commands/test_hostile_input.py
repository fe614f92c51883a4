"""Hostile input on every subcommand's main flags, settings and environment: each is refused with exit status 2
and words on stderr, never a traceback (exit 1). The cases the newcomer's walk found are checked to one line."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

import migrations
from kvpilot.cli import COMMANDS, app

SYNTH = "synthetic:duration_s=60,rate=2"

# (argv, environment): each must exit 2 without a traceback, whatever the message (click's own for a bad choice or
# a number out of its range, ours otherwise). {bin} is a config file that is not UTF-8, {dup} one with a key twice.
GARBAGE: list[tuple[list[str], dict[str, str]]] = [
    (["version", "--bogus"], {}),  # an unknown flag
    (["backtest", "--trace", "/nonexistent"], {}),  # a missing trace
    (["backtest", "--trace", SYNTH, "--duration", "nan"], {}),  # NaN passed every range check and ran
    (["backtest", "--trace", SYNTH, "--slo-ttft", "nan"], {}),  # so did this
    (["backtest", "--trace", SYNTH, "--slo-ttft", "inf"], {}),  # OverflowError traceback
    (["backtest", "--trace", SYNTH, "--rate-scale", "-1"], {}),
    (["backtest", "--trace", SYNTH, "--policies", "bogus"], {}),
    (["backtest", "--trace", SYNTH, "-c", "{bin}"], {}),  # UnicodeDecodeError traceback
    (["backtest", "--trace", SYNTH], {"KVPILOT_SCALER__PLANNER__SIZING": "bogus"}),
    (["simulate", "--trace", SYNTH, "--virtual", "--duration-s", "nan"], {}),  # ran, exit 0
    (["simulate", "--trace", SYNTH, "--virtual", "--cold-start-s", "nan"], {}),  # ran, exit 0
    (["simulate", "--trace", SYNTH, "--virtual", "--engine", "bogus"], {}),
    (["simulate", "--trace", "/nonexistent", "--virtual"], {}),
    (["detect", "--source", "sim", "--duration-s", "-5"], {}),  # ran nothing, exit 0
    (["detect", "--source", "sim", "--interval-s", "nan"], {}),  # ValueError traceback from FleetState
    (["detect", "--source", "sim", "--inject", '{"type":"xid","node":"node-9","gpu":99,"xid":79}@5'], {}),  # KeyError
    (["detect", "--source", "sim", "--inject", '{"type":"xid","node":"node-0","gpu":0,"xid":79}@-5'], {}),
    (["detect", "--source", "sim", "--inject", '{"type":"xid","node":"node-0","gpu":0,"xid":79}@inf'], {}),
    (["detect", "--source", "bogus"], {}),
    (["detect", "--source", "sim", "--replicas", "100000"], {}),  # no bound (simulate's is 1024): ran past 100 s
    (["detect", "--source", "http://[::1"], {}),  # urlsplit's ValueError (an unclosed IPv6 host): a traceback
    (["detect", "--source", "http://[::1]:99999/metrics"], {}),  # a port past 65535
    (["parse", "/nonexistent"], {}),
    (["parse", "{bin}"], {}),
    (["scrape", "bogus"], {}),
    (["scrape", "http://[::1"], {}),  # urlsplit's ValueError: a traceback
    (["scrape", "http://h:0/metrics"], {}),
    (["run", "-c", "{bin}"], {}),  # UnicodeDecodeError traceback
    (["run", "-c", "{dup}"], {}),  # was accepted, the last key winning
    (["run", "--port", "-1"], {}),
    (["demo", "--engine", "bogus", "--json"], {}),  # ValueError traceback
    (["demo", "--json", "--duration", "60"], {"KVPILOT_SCALER__PLANNER__SIZING": "bogus"}),  # SettingsError traceback
    (["demo", "--trace", "/nonexistent"], {}),
    (["demo", "--json", "--speed", "inf"], {}),  # ran
    (["demo", "--json", "--duration", "inf"], {}),  # ran
    (["scrape", "--timeout", "inf", "http://127.0.0.1:1/metrics"], {}),  # accepted: a hung target held it forever
    (["demo", "--trace", "{folder}", "--json"], {}),  # a folder that is no ServeGen trace: ValueError traceback
    (["gpu-agent", "--port", "-1"], {}),
    (["db", "current"], {"KVPILOT_DATABASE_URL": "garbage"}),  # sqlalchemy ArgumentError traceback
    (["db", "upgrade", "bogus"], {}),  # exit 1
    (["db", "downgrade", "-c", "{bin}"], {}),
    (["config", "show", "-c", "{bin}"], {}),  # UnicodeDecodeError traceback
    (["config", "show", "-c", "{dup}"], {}),
    (["config", "show", "-c", "/nonexistent.yaml"], {}),
]


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_DATABASE_URL", f"sqlite:///{tmp_path / 'k.db'}")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe")
    (tmp_path / "dup.yaml").write_text("collector:\n  interval_s: 10\ncollector:\n  interval_s: 6\n")
    (tmp_path / "folder").mkdir()
    # a trace with one row typed in the year 2999 (its rate series took 21 GB), a config nested past PyYAML's
    # recursion, and a config whose targets file is binary garbage
    (tmp_path / "y2999.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,5,3\n2999-05-10 00:00:00+00:00,5,3\n"
    )
    (tmp_path / "deep.yaml").write_text("collector:\n  x: " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "targets.yaml").write_bytes(b"\xff\xfe")
    (tmp_path / "bintargets.yaml").write_text(
        f"collector:\n  discovery:\n    kind: static\n    static_file: {tmp_path / 'targets.yaml'}\n"
    )
    with contextlib.closing(sqlite3.connect(tmp_path / "newer.db")) as db, db:  # a newer kvpilot's schema
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        db.execute("INSERT INTO alembic_version VALUES ('9999_future')")
    # a page with a model label written per sample: 1,001 replicas (an adapter's ValueError traceback, exit 1)
    (tmp_path / "replicas.txt").write_text(
        "".join(f'vllm:num_requests_waiting{{model_name="m{i}"}} 1\n' for i in range(1001))
    )
    (tmp_path / "garbled.txt").write_text("x\n")  # no metric family, one line the parser cannot read
    # ten requests in the first 10 s and one at 1,000 s: a window between them holds none
    (tmp_path / "gap.jsonl").write_text(
        "".join(
            f'{{"timestamp": {t}, "input_length": 600, "output_length": 20}}\n' for t in [*range(0, 10_000, 1000), 1e6]
        )
    )
    names = (
        "bin.yaml", "dup.yaml", "folder", "y2999.csv", "deep.yaml", "targets.yaml", "bintargets.yaml", "newer.db",
        "replicas.txt", "garbled.txt", "gap.jsonl",
    )  # fmt: skip
    return {"head": migrations.head(), **{name.split(".")[0]: str(tmp_path / name) for name in names}}


def _fill(text: str, files: dict[str, str]) -> str:
    for name, path in files.items():
        text = text.replace(f"{{{name}}}", path)
    return text


def _invoke(argv: list[str], env: dict[str, str], files: dict[str, str], monkeypatch: pytest.MonkeyPatch):
    for k, v in env.items():
        monkeypatch.setenv(k, _fill(v, files))
    return CliRunner().invoke(app, [_fill(a, files) for a in argv])


@pytest.mark.parametrize(("argv", "env"), GARBAGE, ids=[" ".join(a)[:60] for a, _ in GARBAGE])
def test_garbage_exits_2_without_a_traceback(argv, env, files, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _invoke(argv, env, files, monkeypatch)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.strip(), "refused in silence"


def test_every_subcommand_is_in_the_table() -> None:
    assert {name for name, _ in COMMANDS} <= {argv[0] for argv, _ in GARBAGE}


# The newcomer's cases (D's walk): exactly one line, and what it says.
ONE_LINE = [
    (["demo", "--engine", "bogus", "--json"], {},
     "error: --engine 'bogus' is not one the simulator serves (known: vllm, sglang, tgi, trtllm, llamacpp)"),
    (["config", "show", "-c", "{bin}"], {}, "error: config file {bin} is not UTF-8 text: byte 0xff on line 1"),
    (["run", "-c", "{bin}"], {}, "error: config file {bin} is not UTF-8 text: byte 0xff on line 1"),
    (["config", "show", "-c", "{dup}"], {},
     "error: config file {dup}: collector is given twice (lines 1 and 3); keep one"),
    (["db", "current"], {"KVPILOT_DATABASE_URL": "garbage"},
     "error: database URL 'garbage' is not a URL SQLAlchemy understands: Could not parse SQLAlchemy URL from given "
     "URL string"),
    (["db", "upgrade", "bogus"], {"KVPILOT_DATABASE_URL": "sqlite:///{bin}.db"},
     "error: upgrading sqlite:///{bin}.db failed: Can't locate revision identified by 'bogus'"),
    (["detect", "--source", "sim", "--inject", '{"type":"xid","node":"node-9","gpu":99,"xid":79}@5'], {},
     "error: --inject at 5s: no GPU 99 on node 'node-9' (nodes: node-0)"),
    # session 17 H: the last of a key given twice was taken ('xid' 48 here), as API bodies did
    (["detect", "--source", "sim", "--inject", '{"type":"xid","node":"node-0","gpu":0,"xid":79,"xid":48}@5'], {},
     "error: --inject '{\"type\":\"xid\",\"node\":\"node-0\",\"gpu\":0,\"xid\":79,\"xid\":48}@5': the key 'xid' is "
     "given more than once in one object; send each key once"),
    (["detect", "--source", "sim", "--duration-s", "-5"], {},
     "error: --duration-s must be a finite number > 0, got -5.0"),
    (["backtest", "--trace", SYNTH, "--slo-ttft", "inf"], {}, "error: --slo-ttft must be a finite number > 0, got inf"),
    # named by flag, not by the fields behind it ("cold_start_s must be >= 0 and slo_ttft_s > 0", "planner: ...")
    (["backtest", "--trace", SYNTH, "--slo-ttft", "-1"], {}, "error: --slo-ttft must be a finite number > 0, got -1.0"),
    (["backtest", "--trace", SYNTH, "--cold-start", "-5"], {},
     "error: --cold-start must be a finite number >= 0, got -5.0"),
    (["backtest", "--trace", SYNTH, "--rollout-speed", "0"], {},
     "error: --rollout-speed must be a finite number > 0, got 0.0"),
    # every number flag says it the same way (kvpilot/commands/_numbers.py); these two ran, and inf waited forever
    (["demo", "--json", "--speed", "inf"], {}, "error: --speed must be a finite number >= 0, got inf"),
    (["demo", "--json", "--duration", "nan"], {}, "error: --duration must be a finite number >= 1, got nan"),
    (["demo", "--json", "--rate-scale", "0.001"], {}, "error: --rate-scale must be a finite number >= 0.01, got 0.001"),
    (["scrape", "--timeout", "inf", "http://127.0.0.1:1/metrics"], {},
     "error: --timeout must be a finite number >= 0.1, got inf"),
    (["simulate", "--trace", SYNTH, "--virtual", "--speed", "nan"], {},
     "error: --speed must be a finite number > 0, got nan"),
    (["simulate", "--trace", SYNTH, "--virtual", "--time-scale", "inf"], {},
     "error: --time-scale must be a finite number > 0, got inf"),
    (["simulate", "--trace", SYNTH, "--virtual", "--cold-start-s", "-1"], {},
     "error: --cold-start-s must be a finite number >= 0, got -1.0"),
    # session 24 E: numpy's refusal of a negative seed, naming no flag (simulate's blamed the trace)
    (["simulate", "--trace", SYNTH, "--virtual", "--seed", "-1"], {},
     "error: --seed must be an integer >= 0, got -1"),
    (["backtest", "--trace", SYNTH, "--seed", "-5"], {}, "error: --seed must be an integer >= 0, got -5"),
    # session 17 H: --rate-scale 1e9 of a 600 s synthetic trace took 5.8 GB in 130 s, then a MemoryError traceback
    (["backtest", "--trace", SYNTH, "--rate-scale", "1e9"], {},
     "error: rate scale 1e+09 would replay some 1.99e+11 requests (199 scaled); at most 20,000,000 fit in memory (as "
     "many as a synthetic trace may hold)"),
    # helper C, session 13: a corrupt timestamp (21 GB and no answer), YAML nested too deeply (RecursionError
    # traceback), a binary targets file (a UnicodeDecodeError's words, naming no file)
    (["backtest", "--trace", "{y2999}", "--json"], {},
     "error: {y2999}:3: timestamp is 356,111 days from line 2's; a trace spans at most 400 days (a corrupt "
     "timestamp?): '2999-05-10 00:00:00+00:00,5,3'"),
    (["config", "show", "-c", "{deep}"], {}, "error: config file {deep}: nested too deeply near line 2"),
    # session 21 E: an adapter's refusal was a ValueError traceback; said as the scrape loop says it
    (["parse", "{replicas}"], {},
     "kvpilot parse: {replicas}: unreadable page: the page names 1,001 replicas (values of model_name); at most "
     "1,000 are read from one page (a label written per request?)"),
    # session 24 E: with --prefix, the check for the prefix parsed the page strictly: a ParseError traceback, exit 1
    (["parse", "--prefix", "foo", "{garbled}"], {},
     "kvpilot parse: {garbled}: no family starts with the prefix `foo`; no engine adapter matches this page: the page "
     "has no metric families at all; read without the lines that could not be read: line 1: missing value ('x'); "
     "families left out: x"),
    # the port any free one: with 8080 taken (another kvpilot run on the machine) it said "cannot listen" instead
    (["run", "-c", "{bintargets}"], {"KVPILOT_HTTP_PORT": "0"},
     "error: collector.discovery (static): {targets}:1: not UTF-8 text (byte 0xff)"),
    # a SQLite URI filename: every connection was refused, "This connection is closed" (exit 1)
    (["run"], {"KVPILOT_DATABASE_URL": "sqlite:///file:{folder}/k.db?mode=ro&uri=true", "KVPILOT_HTTP_PORT": "0"},
     "error: database URL 'sqlite:///file%3A{folder}/k.db?mode=ro&uri=true': SQLite URI filenames (file:...) are not "
     "supported; give the file's path, e.g. sqlite:////var/lib/kvpilot/kvpilot.db"),
    # session 25 E: a tick of 1e-300 s ran forever (t + tick == t before the end), 0.001 s over 600 s for 37 minutes
    (["detect", "--source", "sim", "--interval-s", "1e-300"], {},
     "error: --interval-s 1e-300 over --duration-s 600 is 6e+302 ticks; at most 100,000 are simulated (here "
     "--interval-s >= 0.006, or a shorter --duration-s)"),
    (["detect", "--source", "sim", "--interval-s", "1", "--duration-s", "100001"], {},
     "error: --interval-s 1 over --duration-s 100001 is 100,001 ticks; at most 100,000 are simulated (here "
     "--interval-s >= 1.00001, or a shorter --duration-s)"),
    # session 26 E: a replay of no request reported every policy at 100 % SLO attainment and a p50 TTFT of 0 s, exit 0
    (["backtest", "--trace", "{gap}", "--rate-scale", "1e-300", "--json"], {},
     "error: gap.jsonl: the replay holds no request (--start, --duration and --rate-scale keep none of the trace's); "
     "there is nothing to measure a policy on"),
    (["backtest", "--trace", "{gap}", "--start", "100", "--duration", "60", "--json"], {},
     "error: gap.jsonl: the replay holds no request (--start, --duration and --rate-scale keep none of the trace's); "
     "there is nothing to measure a policy on"),
    # session 26 E: a rollout past the replay's end never started, and the report left it out: exit 0, no word
    (["backtest", "--trace", "{gap}", "--rollout-at", "1e308", "--json"], {},
     "error: gap.jsonl: a rollout at 1e+308 s is not within the replay (1000 s); no rollout would start"),
    # a database a newer kvpilot migrated: was Alembic's CommandError traceback under `run`
    (["run"], {"KVPILOT_DATABASE_URL": "sqlite:///{newer}", "KVPILOT_HTTP_PORT": "0"},
     "error: the store cannot be prepared: the database is at schema revision '9999_future', which this kvpilot does "
     "not have (its newest is {head}): a newer kvpilot wrote it; run that version or a newer one, or step the schema "
     "down with that version's `kvpilot db downgrade {head}` (every instance stopped), or restore a backup"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "env", "line"), ONE_LINE, ids=[" ".join(a)[:60] for a, _, _ in ONE_LINE])
def test_the_walks_cases_are_one_line(argv, env, line: str, files, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _invoke(argv, env, files, monkeypatch)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [_fill(line, files)]


def test_a_bad_setting_in_the_environment_of_the_demo_is_told_as_backtest_tells_it(
    files, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the demo's settings are built inside the replay: kvpilot.cli turns its SettingsError into exit 2
    env = {"KVPILOT_SCALER__PLANNER__SIZING": "bogus"}
    demo = _invoke(["demo", "--json", "--duration", "60"], env, files, monkeypatch)
    backtest = _invoke(["backtest", "--trace", SYNTH], env, files, monkeypatch)
    assert demo.exit_code == backtest.exit_code == 2
    assert (
        demo.stderr.splitlines()[-2:]
        == backtest.stderr.splitlines()
        == [
            "error: invalid configuration (KVPILOT_* environment):",
            "  scaler.planner.sizing: Input should be 'safe', 'lean' or 'adaptive'",
        ]
    )


def test_null_where_the_docs_allow_it_is_read(tmp_path: Path, files, monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/detectors.md and the KvCacheExhaustionImminent runbook: demand_load null, projected_usage 0.6
    cfg = tmp_path / "null.yaml"
    cfg.write_text("detectors:\n  kv:\n    projected_usage: 0.6\n    demand_load: null\n")
    result = CliRunner().invoke(app, ["config", "show", "-c", str(cfg), "--json"])
    assert result.exit_code == 0, result.output
    assert '"demand_load": null' in result.stdout


def test_a_store_in_a_read_only_folder_is_named_with_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SQLite says only "unable to open database file" (it writes -wal and -shm beside the store); a read-only
    # mount is what makes the folder unwritable even for root, so the check is made to see one here
    from kvpilot.commands.run import _which

    monkeypatch.setattr("os.access", lambda path, mode: str(path) != str(tmp_path))
    assert _which(f"sqlite:///{tmp_path}/k.db") == (
        f" (sqlite:///{tmp_path}/k.db: its folder {tmp_path} is read-only, and SQLite writes its -wal and -shm files "
        "there)"
    )
    assert _which("postgresql://u:secret@db/k") == " (postgresql://u:***@db/k)"


def test_gpu_agent_on_a_taken_port_says_so_in_one_line() -> None:
    with socket.socket() as taken:  # dcgm-exporter already on the node holds 9400: was an OSError traceback
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["gpu-agent", "--host", "127.0.0.1", "--port", str(port)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"kvpilot gpu-agent: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
