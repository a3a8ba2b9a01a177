"""line_alerts on both engines: one row per alert, whatever is sent twice, in whatever order."""

from __future__ import annotations

from dayclose.settings import Target
from dayclose.stream.alerts import AlertTable, ops_target


def alert(event: str, **extra) -> dict:
    base = {
        "alert_id": "L-001-1/live/drift_cusum/fill_level_ml/high/25250090450",
        "line_id": "L-001-1",
        "plant_id": "P-001",
        "sku": "PILS-330-BTL",
        "detector": "drift_cusum",
        "sensor": "fill_level_ml",
        "direction": "high",
        "lane": "live",
        "paged": True,
        "opened_at": "2026-11-29T01:59:44.120Z",
        "opened_plc_seq": 25250090450,
        "opened_value": 10.4,
        "threshold": 10.0,
        "raised_at": "2026-11-29T01:59:44.301Z",
        "latency_ms": 4.0,
        "reading_to_alert_ms": 181.0,
        "closed_at": None,
        "closed_plc_seq": None,
        "cleared_at": None,
        "event": event,
    }
    return {**base, **extra}


def test_line_alerts_keep_one_row_per_alert(engine: Target) -> None:
    table = AlertTable(engine)
    closing = alert(
        "close",
        closed_at="2026-11-29T01:59:52.000Z",
        closed_plc_seq=25250090550,
        cleared_at="2026-11-29T01:59:52.200Z",
    )
    assert table.upsert([alert("open")]) == 1
    table.upsert(
        [alert("open", raised_at="2026-11-29T02:10:00.000Z"), closing]
    )  # a redelivery, then the close
    table.upsert([alert("open"), closing])  # both again after a restart
    rows = table.read()
    assert len(rows) == 1
    row = rows[0]
    assert (row["closed_plc_seq"], str(row["raised_at"]), row["paged"]) == (
        25250090550,
        "2026-11-29 01:59:44.301000",
        True,
    )
    if engine.duckdb_path is not None:  # a file of its own, never the warehouse file
        assert ops_target(engine).duckdb_path != engine.duckdb_path
        assert ops_target(engine).duckdb_path.name.endswith(".ops.duckdb")
