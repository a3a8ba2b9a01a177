"""Alerts: the record an opening or closing carries, and the `line_alerts` table ops reads.

An alert is one episode of one detector on one line (or, for the dead-letter rate, one
plant): it is published to the alerts stream when it opens and again when it closes, with
`Nats-Msg-Id` = alert_id/event, and kept as one row of `line_alerts` (upserted by alert_id).
The id is made of the line, lane, detector, sensor, direction and the plc_seq of the reading
that opened it, so a redelivered or replayed message produces the same id: the stream's
duplicate window and the table's key keep one copy.

Where the table lives: Postgres `<schema>_ops.line_alerts`, beside the warehouse (its own
schema, short transactions, no lock shared with the nightly run). DuckDB allows one writing
process per file and the nightly job holds the warehouse file during its steps, so on
DuckDB the table lives in a file of its own, `<warehouse>.ops.duckdb` (DAYCLOSE_OPS_DUCKDB),
schema `main_ops`, opened per batch of alerts and closed again: the monitor never waits
for the nightly run, nor the nightly run for the monitor. Only one process writes it: the
alerts sink run by monitor worker 0, fed from the alerts stream.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from dayclose.errors import WarehouseBusy
from dayclose.settings import Target
from dayclose.warehouse import Warehouse

TABLE = "line_alerts"

# (column, SQL type, description): the table, its DDL and the dbt source docs follow this list.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("alert_id", "varchar", "line/lane/detector/sensor/direction/plc_seq of the reading that opened it"),
    ("line_id", "varchar", "the line (null for a plant's dead-letter rate)"),
    ("plant_id", "varchar", "the plant"),
    ("sku", "varchar", "the SKU the line was filling"),
    ("detector", "varchar", "out_of_spec, rate_of_change, stuck, drift_cusum, drift_ewma, dead_letter_rate"),
    ("sensor", "varchar", "fill_level_ml, capper_torque_nm or temperature_c"),
    ("direction", "varchar", "high or low, where it has one"),
    ("lane", "varchar", "live, late (a live reading behind its line's watermark) or backfill (a replay)"),
    ("paged", "boolean", "true for live alerts only: historical ones are recorded, not paged"),
    ("opened_at", "timestamp", "event time of the reading that opened it (UTC)"),
    ("opened_plc_seq", "bigint", "plc_seq of that reading"),
    ("opened_value", "double precision", "the value that tripped it (sensor unit; CUSUM in sigma)"),
    ("threshold", "double precision", "the threshold it crossed, in the same unit"),
    ("raised_at", "timestamp", "when the monitor raised it (UTC, plants' clock)"),
    ("latency_ms", "double precision", "from the message's arrival in the stream to the alert"),
    ("reading_to_alert_ms", "double precision", "from the reading's own timestamp to the alert"),
    ("closed_at", "timestamp", "event time of the reading that closed it; null while open"),
    ("closed_plc_seq", "bigint", "plc_seq of that reading"),
    ("cleared_at", "timestamp", "when the monitor closed it (UTC, plants' clock)"),
)
_TIMES = {"opened_at", "raised_at", "closed_at", "cleared_at"}
KEY_COLUMNS = ("alert_id",)
CLOSE_COLUMNS = ("closed_at", "closed_plc_seq", "cleared_at")


def ops_schema(target: Target) -> str:
    return f"{target.schema}_ops"


def ops_target(target: Target) -> Target:
    """Where line_alerts lives: the Postgres database itself, or the DuckDB ops file."""
    if target.duckdb_path is None:
        return target
    chosen = os.environ.get("DAYCLOSE_OPS_DUCKDB")
    path = Path(chosen).resolve() if chosen else target.duckdb_path.with_suffix(".ops.duckdb")
    return replace(target, duckdb_path=path)


def _ts(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.rstrip("Z"))


def alert_line(alert: dict) -> str:
    """One line for an operator: where, what, the value against its threshold, when, and whether
    it is still open (an alert as published, or a row of line_alerts)."""
    where = f"{alert.get('plant_id')}/{alert.get('line_id') or '-'}"
    what = " ".join(str(alert[k]) for k in ("detector", "sensor", "direction") if alert.get(k))
    value, threshold = alert.get("opened_value"), alert.get("threshold")
    figures = (
        f"value {value:.4g} against {threshold:.4g}" if value is not None and threshold is not None else ""
    )
    state = "closed" if alert.get("closed_at") else "open"
    latency = alert.get("latency_ms")
    after = f", {latency:.0f} ms after arrival" if latency is not None else ""
    return (
        f"ALERT {where} {what}: {figures} at {alert.get('opened_at')} ({alert.get('lane')}, {state}{after})"
    )


def row_of(alert: dict) -> tuple:
    return tuple(_ts(alert.get(c)) if c in _TIMES else alert.get(c) for c, _, _ in COLUMNS)


class AlertTable:
    """line_alerts: created on first use, upserted by alert_id in one short transaction a batch."""

    def __init__(self, target: Target):
        self.target = ops_target(target)
        self.schema = ops_schema(target)
        self._ready = False

    @property
    def relation(self) -> str:
        return f"{self.schema}.{TABLE}"

    def _ensure(self, wh: Warehouse) -> None:
        if self._ready:
            return
        wh.execute(f"create schema if not exists {self.schema}")
        cols = ", ".join(f"{c} {t}" for c, t, _ in COLUMNS)
        wh.execute(f"create table if not exists {self.relation} ({cols}, primary key (alert_id))")
        self._ready = True

    def _retrying(self, work, retry_for: float):
        """Run work(wh) on a fresh connection, waiting while a reader holds the DuckDB ops file."""
        deadline = time.monotonic() + retry_for
        while True:
            try:
                with Warehouse(self.target) as wh:
                    self._ensure(wh)
                    return work(wh)
            except WarehouseBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def upsert(self, alerts: Iterable[dict], retry_for: float = 30.0) -> int:
        """Write openings and closings; an alert seen again changes nothing but its closing."""
        rows = [row_of(a) for a in alerts]
        if not rows:
            return 0
        names = [c for c, _, _ in COLUMNS]
        keep = ", ".join(f"{c} = coalesce({TABLE}.{c}, excluded.{c})" for c in CLOSE_COLUMNS)
        sql = (
            f"insert into {self.relation} ({', '.join(names)}) values ({', '.join(['%s'] * len(names))}) "
            f"on conflict (alert_id) do update set {keep}"
        )

        def write(wh: Warehouse) -> int:
            with wh.transaction():
                for row in rows:
                    wh.execute(sql, row)
            return len(rows)

        return self._retrying(write, retry_for)

    def read(self, where: str = "true", retry_for: float = 30.0) -> list[dict]:
        """Rows as dicts, oldest first (tests, demo, a dashboard's query)."""

        def query(wh: Warehouse) -> list[dict]:
            names, rows = wh.columns_and_rows(
                f"select * from {self.relation} where {where} order by raised_at"
            )
            return [dict(zip(names, r, strict=True)) for r in rows]

        return self._retrying(query, retry_for)
