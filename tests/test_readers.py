"""What analysts see, checked in a real headless browser (Debian's chromium): the dbt docs
site leads to the published numbers, and `dayclose report` draws them."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from dayclose import dbt_runner as dbt
from dayclose.cli import main
from dayclose.generate import generate_sales
from dayclose.jobs import run_nightly
from dayclose.publish import readers_file
from dayclose.settings import PROJECT_DIR, Target, resolve_target
from dayclose.warehouse import Warehouse
from tests.helpers import ts

ARTIFACTS = PROJECT_DIR / "test-artifacts"

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    found = (
        os.environ.get("DAYCLOSE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if not found:
        pytest.fail("no chromium: install Debian's (apt-get install chromium); scripts/test does when it can")
    return found


def browse(url: str, tmp_path: Path, screenshot: Path | None = None) -> str:
    """The DOM of `url` after its scripts ran (and a screenshot), from headless chromium."""
    what = [f"--screenshot={screenshot}", "--window-size=1200,1600"] if screenshot else ["--dump-dom"]
    done = subprocess.run(
        [
            chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'chromium'}",
            "--virtual-time-budget=15000",
            *what,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@contextlib.contextmanager
def served(folder: Path) -> Iterator[str]:
    """`folder` over HTTP on a free local port (the docs site loads its JSON by XHR)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture
def published_week(engine: Target, landing: Path) -> Target:
    generate_sales(landing, date(2026, 11, 16), 8, shops=12, events_per_day=400, seed=2)
    assert run_nightly("sales", engine, landing, ts("2026-11-24T00:30"), quiet=True).ok
    return engine


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # the same site on both engines
def test_docs_site_leads_to_the_published_numbers(published_week: Target, tmp_path: Path) -> None:
    outcome = dbt.run_command(published_week, ["docs", "generate"])
    assert outcome.success, outcome.error
    site = published_week.state_dir / "target"
    assert (site / "assets" / "lateness_curve.png").exists()
    with served(site) as url:
        overview = browse(f"{url}/index.html#!/overview", tmp_path)
        assert "Read the published schema" in overview and "can_still_change" in overview
        assert 'src="assets/lateness_curve.png"' in overview
        model = browse(f"{url}/index.html#!/model/model.dayclose.daily_sales", tmp_path)
        assert "_published.daily_sales" in model and "Daily sales per shop" in model
        assert "Lineage Graph" in model or "lineage" in model.lower()
        source = browse(f"{url}/index.html#!/source/source.dayclose.published.daily_sales", tmp_path)
        assert "main_published" in source and "daily_sales" in source
        lineage = browse(f"{url}/index.html#!/model/model.dayclose.daily_sales?g_v=1", tmp_path)
        assert "<canvas" in lineage  # the lineage graph was drawn


def test_report_draws_the_published_numbers(published_week: Target, tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert main(["report", "--target", published_week.name, "--out", str(out)]) == 0
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["completeness.png", "dead_letters.png", "lateness_curve.png", "run_history.png"]
    for name in pngs:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = browse((out / "index.html").as_uri(), tmp_path)
    for name in pngs:
        assert f'src="{name}"' in page
    # what each chart shows, in its caption
    captions = dict(re.findall(r"<h2>(.*?)</h2>.*?<p class=\"caption\">(.*?)</p>", page, re.S))
    assert re.fullmatch(
        r"sales: 99.9% of a day.*s events arrived by \d+ h", captions["How late data arrives"]
    )
    recent = captions["Recent days"].split("; ")
    assert [r[:16] for r in recent] == [f"sales 2026-11-{d}" for d in range(16, 24)], recent
    assert all(re.fullmatch(r"sales 2026-11-\d\d: \d+\.\d%, (final|can still change)", r) for r in recent)
    assert [r.endswith("can still change") for r in recent] == [False] * 5 + [True] * 3
    assert re.fullmatch(r"(sales \w+: [\d,]+(; )?)+", captions["Dead letters"]), captions["Dead letters"]
    assert captions["Runs"] == "1 run, 0 not published"
    # the page as a reader sees it, kept for a look after the run (test-artifacts/, git-ignored)
    shot = ARTIFACTS / f"report-{published_week.name}.png"
    shot.parent.mkdir(exist_ok=True)
    browse((out / "index.html").as_uri(), tmp_path, screenshot=shot)
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.std() > 0.05  # the page drew charts, not a blank page


def test_a_day_whose_lateness_is_not_measured_yet_is_not_shown_as_0_percent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh warehouse: two days, no settled day to measure lateness on."""
    monkeypatch.setenv("DAYCLOSE_DUCKDB", str(tmp_path / "w.duckdb"))
    monkeypatch.setenv("DAYCLOSE_STATE_DIR", str(tmp_path / "state"))
    landing = tmp_path / "landing"
    generate_sales(landing, date(2026, 11, 22), 2, shops=5, events_per_day=100, seed=5)
    target = resolve_target("duckdb")
    assert run_nightly("sales", target, landing, ts("2026-11-24T00:30"), quiet=True).ok
    out = tmp_path / "report"
    assert main(["report", "--target", "duckdb", "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "lateness not measured yet" in page
    assert "sales 2026-11-23: not measured yet, can still change" in page
    assert "0.0%" not in page


def test_report_tables_print_values_as_readers_read_them() -> None:
    from datetime import datetime
    from decimal import Decimal

    from dayclose.report import _cell

    assert _cell(7744.0) == "7,744" and _cell(Decimal("12.50")) == "12.50" and _cell(-3) == "-3"
    assert _cell(datetime(2026, 11, 30, 9, 0, 1, 123456)) == "2026-11-30 09:00:01"
    assert _cell(True) == "yes" and _cell(None) == ""


def test_the_overviews_query_runs_where_readers_read(published_week: Target) -> None:
    """The query the docs site's overview gives readers runs as written on the readers' file
    and on the warehouse (DuckDB), and with the Postgres schema's name on Postgres."""
    import re

    docs = (PROJECT_DIR / "models" / "published" / "_published__docs.md").read_text()
    [query] = re.findall(r"```sql\n(.*?)```", docs, re.S)
    if published_week.name == "duckdb":
        import duckdb

        path = readers_file(published_week)
        with duckdb.connect(str(path), read_only=True) as readers:
            rows = readers.execute(query).fetchall()
            assert readers.execute("select count(*) from daily_sales").fetchone()[0] > 0  # bare names too
    else:
        query = query.replace("main_published.", f"{published_week.schema}_published.")
    with Warehouse(published_week) as wh:
        in_warehouse = wh.query(query)
    if published_week.name == "duckdb":
        assert rows == in_warehouse
    days = [str(r[0]) for r in in_warehouse]
    assert days == [f"2026-11-{d}" for d in range(16, 24)], days
    # the window's oldest day had its last build; the three after it can still change
    assert [bool(r[3]) for r in in_warehouse] == [False] * 5 + [True] * 3
