"""The loader on both engines, without dbt: batches written together, and alone when one fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dayclose.loader import load as load_module
from dayclose.loader import load_source
from dayclose.settings import Target
from dayclose.sources import SALES
from dayclose.warehouse import Warehouse
from tests.helpers import sale, ts, write_batch

HOURS = [f"2026-11-23T{h:02d}" for h in range(1, 8)]


def test_batches_are_written_together_numbered_per_file_and_a_failing_one_is_refused_alone(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, hour in enumerate(HOURS):  # each line says which batch it is and its line number
        lines = [
            sale(f"{hour}/{i}", "S-001", f"{hour}:00:00Z", f"{hour}:01:00Z") for i in range(1, 3 + 40 * k)
        ]
        write_batch(landing, hour, lines)
    real_check, real_ingest = load_module.check_batch, load_module.ingest_files
    calls: list[set[str]] = []

    def check_then_change(batch, spool):  # T04's file changes after its check: one line more
        checked = real_check(batch, spool)
        if batch.batch_id == HOURS[3]:
            checked.files[0].scan.lines -= 1
        return checked

    def ingest(wh, table, files):
        calls.append({f.batch_id for f in files})
        return real_ingest(wh, table, files)

    monkeypatch.setattr(load_module, "check_batch", check_then_change)
    monkeypatch.setattr(load_module, "ingest_files", ingest)
    with Warehouse(engine) as wh:
        report = load_source(wh, SALES, landing, ts("2026-11-24T00:30"), progress=None)
        schema = engine.landing_schema
        rows = wh.query(f"select batch_id, line_number, raw_line from {schema}.sale_lines")
        ledger = dict(wh.query(f"select batch_id, status from {schema}.load_ledger"))
    assert calls[0] == set(HOURS)  # one group first, then each batch alone
    assert [len(c) for c in calls[1:]] == [1] * len(HOURS)
    status = {r.batch_id: r.status for r in report.results}
    assert status == {h: "refused" if h == HOURS[3] else "loaded" for h in HOURS} == ledger
    [refused] = report.refused
    assert "122 lines read from the files, 121 checked against _SUCCESS" in refused.message
    assert sorted((b, n) for b, n, _ in rows) == sorted(
        (h, i) for k, h in enumerate(HOURS) if h != HOURS[3] for i in range(1, 3 + 40 * k)
    )
    for batch_id, number, line in rows:
        assert json.loads(line)["event_id"] == f"{batch_id}/{number}"
