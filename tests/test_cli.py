"""Every bad argument and unreachable dependency: one line naming the problem and what is
expected, a distinct non-zero exit code, no traceback (unless --debug)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dayclose.errors import EXIT_CONFIG, EXIT_NOT_FOUND, EXIT_UNAVAILABLE, EXIT_USAGE
from dayclose.settings import POSTGRES_DEFAULTS, PROJECT_DIR, Target, block_memory, dbt_env, postgres_options


def dayclose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dayclose.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "env", "code", "says"),
    [
        (
            ["run", "sales", "--as-of", "24/11/2026", "--landing", "."],
            {},
            EXIT_USAGE,
            "--as-of '24/11/2026' is not an instant",
        ),
        (
            ["generate", "sales", "--start", "23.11.2026", "--days", "1", "--landing", "x"],
            {},
            EXIT_USAGE,
            "--start '23.11.2026' is not a date: expected YYYY-MM-DD",
        ),
        (
            ["generate", "sales", "--start", "2026-11-23", "--days", "-1", "--landing", "x"],
            {},
            EXIT_USAGE,
            "argument --days: -1 is less than 1",
        ),
        (
            ["run", "sales", "--landing", "/no/such/landing"],
            {},
            EXIT_NOT_FOUND,
            "--landing /no/such/landing: no such folder",
        ),
        (
            ["run", "sales", "--landing", "."],
            {"DAYCLOSE_TARGET": "oracle"},
            EXIT_USAGE,
            "unknown target 'oracle'",
        ),
        (
            ["run", "sales", "--target", "postgres", "--landing", "."],
            {"PGHOST": "127.0.0.1", "PGPORT": "PORT"},
            EXIT_UNAVAILABLE,
            "cannot connect to Postgres at 127.0.0.1:PORT",
        ),
        (
            ["report", "--out", "OUT"],
            {"DAYCLOSE_DUCKDB": "WAREHOUSE"},
            EXIT_NOT_FOUND,
            "no published numbers yet",
        ),
        (
            ["run", "sales", "--landing", "TMP"],
            {
                "DAYCLOSE_DUCKDB": "WAREHOUSE",
                "DAYCLOSE_STATE_DIR": "STATE",
                "DAYCLOSE_LOADER_MEMORY_LIMIT": "lots",
            },
            EXIT_CONFIG,
            "DAYCLOSE_LOADER_MEMORY_LIMIT='lots' is not a memory size",
        ),
    ],
    ids=[
        "as-of",
        "start",
        "days",
        "landing",
        "target",
        "postgres-down",
        "report-nothing-published",
        "loader-memory-limit",
    ],
)
def test_a_bad_argument_or_dependency_is_one_clear_line(
    tmp_path: Path, args: list[str], env: dict[str, str], code: int, says: str
) -> None:
    port = str(closed_port())
    fill = {
        "PORT": port,
        "OUT": str(tmp_path / "report"),
        "WAREHOUSE": str(tmp_path / "w.duckdb"),
        "TMP": str(tmp_path),
        "STATE": str(tmp_path / "state"),
    }
    args = [fill.get(a, a) for a in args]
    env = {k: fill.get(v, v) for k, v in env.items()}
    says = says.replace("PORT", port)
    done = dayclose(*args, env=env)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_debug_shows_the_traceback() -> None:
    done = dayclose("--debug", "run", "sales", "--as-of", "24/11/2026", "--landing", ".")
    assert done.returncode == EXIT_USAGE
    assert "Traceback" in done.stderr and "is not an instant" in done.stderr.splitlines()[-1]


def test_dbt_runs_on_postgres_with_the_jit_compiler_off_unless_the_user_set_it() -> None:
    """Compiling a nightly statement cost more than running it at 120 days of history."""
    assert postgres_options("") == "-c jit=off"
    assert postgres_options("-c work_mem=64MB") == "-c work_mem=64MB -c jit=off"
    assert postgres_options("-c jit=on") == "-c jit=on"
    assert dbt_env(Target(name="postgres", schema="s"))["PGOPTIONS"].endswith("-c jit=off")
    assert "PGOPTIONS" not in dbt_env(Target(name="duckdb", schema="main", duckdb_path=Path("w.duckdb")))


def test_duckdbs_kept_block_memory_is_2gb_or_a_quarter_of_a_smaller_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DuckDB refuses a block_allocator_memory above 80% of the machine's memory: on a small
    machine dbt's sessions keep a quarter of it; a value the user set is kept as it is."""
    assert [block_memory(n * 1_000_000_000) for n in (24, 8, 2, 1)] == ["2000MB", "2000MB", "500MB", "250MB"]
    assert block_memory(0) == "0MB"  # memory unknown: none kept
    duckdb = Target(name="duckdb", schema="main", duckdb_path=Path("w.duckdb"))
    monkeypatch.delenv("DAYCLOSE_DUCKDB_BLOCK_MEMORY", raising=False)
    assert dbt_env(duckdb)["DAYCLOSE_DUCKDB_BLOCK_MEMORY"] == block_memory()
    monkeypatch.setenv("DAYCLOSE_DUCKDB_BLOCK_MEMORY", "300MB")
    assert dbt_env(duckdb)["DAYCLOSE_DUCKDB_BLOCK_MEMORY"] == "300MB"


def test_the_nightly_job_imports_none_of_the_streaming_packages() -> None:
    """`pip install dayclose` is the nightly job: the CLI, the job, the flows' steps and the
    report load without nats-py, numba or msgspec (the `[stream]` extra), and a streaming
    command without them is one line naming the extra."""
    script = """
import sys
import dayclose.cli, dayclose.jobs, dayclose.prefect_tasks, dayclose.report
dayclose.cli.build_parser()
print(sorted({'nats', 'numba', 'msgspec'} & {m.split('.')[0] for m in sys.modules}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    hidden = """
import sys
from dayclose.cli import main
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'nats':
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
sys.exit(main(['stream', 'setup']))
"""
    done = subprocess.run([sys.executable, "-c", hidden], capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_CONFIG, done.stderr
    assert done.stderr.strip().splitlines() == [
        "dayclose stream: the operators' streaming path needs the package nats: "
        "install dayclose[stream] (pip install -e '.[stream]')"
    ]


def test_the_loader_the_lock_and_dbt_reach_one_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the libpq variables, dayclose's own connections (postgres_connect) and dbt's
    profile take the same defaults, and the summary names the server and database."""
    for name in (*POSTGRES_DEFAULTS, "PGPASSWORD"):
        monkeypatch.delenv(name, raising=False)
    target = Target(name="postgres", schema="dayclose")
    env = dbt_env(target)
    assert {name: env[name] for name in POSTGRES_DEFAULTS} == POSTGRES_DEFAULTS
    profile = (PROJECT_DIR / "profiles.yml.example").read_text()
    for name, default in POSTGRES_DEFAULTS.items():  # dbt's own defaults, should it run without dayclose
        assert f"env_var('{name}', '{default}')" in profile
    assert target.describe() == "postgres 127.0.0.1:5432, database postgres, schema dayclose"
    monkeypatch.setenv("PGDATABASE", "close")
    assert dbt_env(target)["PGDATABASE"] == "close"
    assert target.describe() == "postgres 127.0.0.1:5432, database close, schema dayclose"


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # the warehouse: the environment's
def test_a_run_prints_its_summary_on_stdout_and_progress_on_stderr(engine: Target, landing: Path) -> None:
    """dbt's node lines go to its log file (named on stderr), not before the summary;
    no colour codes where the output is not a terminal; --verbose shows dbt's lines."""
    from datetime import date

    from dayclose.generate import generate_sales

    generate_sales(landing, date(2026, 11, 20), 2, shops=5, events_per_day=50, seed=1)
    quiet = dayclose("run", "sales", "--as-of", "2026-11-22T00:30", "--landing", str(landing))
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert quiet.stdout.startswith("dayclose run sales as of 2026-11-22 00:30 UTC on duckdb: days"), (
        quiet.stdout
    )
    assert "\x1b[" not in quiet.stdout + quiet.stderr
    assert "Running with dbt" not in quiet.stdout + quiet.stderr
    [log] = [
        line.split("dbt's log: ")[1].rstrip(")")
        for line in quiet.stderr.splitlines()
        if "dbt's log: " in line
    ]
    assert "START sql" in Path(log).read_text()
    assert "publish sales: the gates passed" in quiet.stderr
    verbose = dayclose("run", "sales", "--as-of", "2026-11-22T00:30", "--landing", str(landing), "--verbose")
    assert verbose.returncode == 0, verbose.stdout + verbose.stderr
    assert "Running with dbt" in verbose.stdout and "\x1b[" not in verbose.stdout


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # the warehouse: the environment's
def test_a_landing_without_the_jobs_folder_fails_the_run_naming_it(engine: Target, landing: Path) -> None:
    """A mistyped --landing or an unmounted share is no quiet night: exit 1, the folder named."""
    from datetime import date

    from dayclose.generate import generate_sales

    generate_sales(landing, date(2026, 11, 20), 1, shops=3, events_per_day=20, seed=1)  # no units/
    done = dayclose("run", "units", "--as-of", "2026-11-21T00:30", "--landing", str(landing))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"ERROR no folder {landing / 'units'} for the units batches" in done.stdout, done.stdout
    assert "result: FAILED" in done.stdout
