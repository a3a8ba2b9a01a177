"""Fixtures: every scenario runs on the embedded DuckDB and on a real Postgres.

Postgres comes from the libpq variables (PGHOST, PGPORT, PGUSER, PGPASSWORD,
PGDATABASE) when PGHOST is set, else from an embedded server started here with
the pgserver package. Each test gets its own fresh database. A Postgres test
never skips: if no server can be had, it errors.
"""

from __future__ import annotations

import os
import tempfile
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


@pytest.fixture(params=["duckdb", "postgres"])
def engine(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """A fresh, empty warehouse of each kind, with the environment pointing at it."""
    monkeypatch.setenv("DAYCLOSE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    if request.param == "duckdb":
        monkeypatch.setenv("DAYCLOSE_DUCKDB", str(tmp_path / "warehouse.duckdb"))
        yield resolve_target("duckdb")
        return
    yield from _fresh_postgres(request, monkeypatch)


@pytest.fixture
def postgres_target(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """A fresh, empty Postgres warehouse, for what only concerns Postgres."""
    monkeypatch.setenv("DAYCLOSE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    yield from _fresh_postgres(request, monkeypatch)


def _fresh_postgres(request, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """A database of its own on the test Postgres, dropped afterwards."""
    with fresh_database(request.getfixturevalue("postgres_server"), monkeypatch):
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
