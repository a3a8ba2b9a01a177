"""Fixtures: every scenario runs on the embedded DuckDB and on a real Postgres.

Postgres comes from the libpq variables (PGHOST, PGPORT, PGUSER, PGPASSWORD,
PGDATABASE) when PGHOST is set, else from an embedded server started here with
the pgserver package. Each test gets a new, empty database. A Postgres test
never skips: if no server can be had, it errors.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlparse

import pytest

from dayclose.settings import Target, resolve_target
from tests.helpers import fresh_database

if TYPE_CHECKING:
    from tests.engine_runs import EngineRuns

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[dict[str, str]]:
    """libpq settings of a Postgres server: the environment's, or an embedded one."""
    if os.environ.get("PGHOST"):
        yield {k: os.environ[k] for k in ("PGHOST", "PGPORT", "PGUSER", "PGPASSWORD") if k in os.environ}
        return
    import pgserver

    data = tempfile.mkdtemp(prefix="dayclose-pg-")
    server = pgserver.get_server(data, cleanup_mode="stop")
    uri = urlparse(server.get_uri())
    settings = {"PGHOST": parse_qs(uri.query)["host"][0], "PGUSER": uri.username or "postgres"}
    try:
        yield settings
    finally:
        server.cleanup()


# The warehouse of the `engine` and `postgres_target` fixtures: the same DuckDB file name, state
# folder and Postgres database name for every test of a pytest worker, emptied (the database
# dropped and created) before each test. dbt then parses the project in full once per worker and
# partially afterwards, as a night after the first does: its partial-parse state is checked
# against a hash of the profile's values (the DuckDB file, the database), so each test with a
# warehouse of its own cost a full parse (3.5 s alone on this machine, 95 of them in a test run).
# One name per worker process (each imports conftest once), another in every test session.
WORKER_DATABASE = f"dayclose_test_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def warehouse_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


def emptied(home: Path) -> Path:
    """`home` emptied but for dbt's partial-parse state of each target folder."""
    kept = {path: path.read_bytes() for path in home.glob("state/*/target/partial_parse.msgpack")}
    shutil.rmtree(home, ignore_errors=True)
    for path, blob in kept.items():
        path.parent.mkdir(parents=True)
        path.write_bytes(blob)
    return home


@pytest.fixture(params=["duckdb", "postgres"])
def engine(request, warehouse_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """A fresh, empty warehouse of each kind, with the environment pointing at it."""
    home = emptied(warehouse_home)
    monkeypatch.setenv("DAYCLOSE_STATE_DIR", str(home / "state"))
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    if request.param == "duckdb":
        monkeypatch.setenv("DAYCLOSE_DUCKDB", str(home / "warehouse.duckdb"))
        yield resolve_target("duckdb")
        return
    yield from _fresh_postgres(request, monkeypatch)


@pytest.fixture
def postgres_target(request, warehouse_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """A fresh, empty Postgres warehouse, for what only concerns Postgres."""
    monkeypatch.setenv("DAYCLOSE_STATE_DIR", str(emptied(warehouse_home) / "state"))
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    yield from _fresh_postgres(request, monkeypatch)


def _fresh_postgres(request, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """The worker's test database on the test Postgres, new and empty, dropped afterwards."""
    with fresh_database(request.getfixturevalue("postgres_server"), monkeypatch, WORKER_DATABASE):
        yield resolve_target("postgres")


@pytest.fixture(scope="session")
def engine_runs(tmp_path_factory: pytest.TempPathFactory) -> EngineRuns:
    """The landing every engine runs, and DuckDB's runs of it, the reference (tests/engine_runs.py)."""
    from tests.engine_runs import EngineRuns

    return EngineRuns(tmp_path_factory.mktemp("engines"))


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    path = tmp_path / "landing"
    path.mkdir()
    return path


# The streaming path (dayclose/stream): a private nats-server per test (tests/stream_fixtures.py).
from tests.stream_fixtures import nats  # noqa: E402, F401
