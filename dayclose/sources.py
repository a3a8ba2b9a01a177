"""The registry of landing sources: the one Python place that names them.

Each source is a folder of the landing (`<landing>/<name>/arrived=.../`), a dbt tag that
selects its models and gates, and a daily mart readers read. The dbt side of the same
registry is the project variable `landing_sources` (dbt_project.yml): each source's
nightly window and the models its lateness is measured from.

Adding a source: one entry here, one entry in `landing_sources`, and its dbt models
(a staging model, a validated-lines model and its daily mart, tagged with the source's name).
"""

from __future__ import annotations

from dataclasses import dataclass

from dayclose.errors import DaycloseError


@dataclass(frozen=True)
class Field:
    """One field of a landing line: its JSON name and how it is decoded."""

    name: str
    kind: str  # text | timestamp | decimal | integer | number

    @property
    def sql_type(self) -> str:
        return {
            "text": "varchar",
            "timestamp": "timestamp",
            "decimal": "decimal(18, 2)",
            "integer": "bigint",
            "number": "double precision",
        }[self.kind]


@dataclass(frozen=True)
class Source:
    """A landing source and what its nightly job builds and reports."""

    name: str
    table: str  # its raw table in <schema>_landing
    fields: tuple[Field, ...]
    event_time: str
    mart: str  # the daily mart readers read
    date_column: str  # the mart's day
    value_sql: str  # the day's headline figure, summed over the mart's rows
    count_sql: str  # the day's events
    value_label: str
    count_label: str
    arrival_time: str = "received_at"

    @property
    def columns(self) -> list[tuple[str, str]]:
        meta = [
            ("batch_id", "varchar"),
            ("batch_arrived_at", "timestamp"),
            ("batch_completed_at", "timestamp"),
            ("file_name", "varchar"),
            ("line_number", "integer"),
            ("raw_line", "varchar"),
            ("decode_error", "varchar"),
        ]
        return meta + [(f.name, f.sql_type) for f in self.fields]

    @property
    def selector(self) -> str:
        """The dbt selection of the job: the source's models and gates and what they need."""
        return f"+tag:{self.name}"

    @property
    def dead_letters(self) -> str:
        return f"{self.name}_dead_letters"

    @property
    def late_arrivals(self) -> str:
        return f"{self.name}_late_arrivals"


SALES = Source(
    name="sales",
    table="sale_lines",
    fields=(
        Field("event_id", "text"),
        Field("shop_id", "text"),
        Field("sold_at", "timestamp"),
        Field("received_at", "timestamp"),
        Field("amount", "decimal"),
    ),
    event_time="sold_at",
    mart="daily_sales",
    date_column="sale_date",
    value_sql="sum(sales_amount)",
    count_sql="sum(sales_count)",
    value_label="",
    count_label="sales",
)

UNITS = Source(
    name="units",
    table="unit_lines",
    fields=(
        Field("line_id", "text"),
        Field("plc_seq", "integer"),
        Field("sku", "text"),
        Field("event_at", "timestamp"),
        Field("received_at", "timestamp"),
        Field("verdict", "text"),
        Field("fill_level_ml", "number"),
        Field("capper_torque_nm", "number"),
        Field("temperature_c", "number"),
    ),
    event_time="event_at",
    mart="daily_good_units",
    date_column="production_date",
    value_sql="sum(good_units)",
    count_sql="sum(good_units + rejected_units)",
    value_label="good units",
    count_label="units",
)

SOURCES: dict[str, Source] = {s.name: s for s in (SALES, UNITS)}


def source(name: str) -> Source:
    """The registered source `name`, or a DaycloseError listing the known ones."""
    try:
        return SOURCES[name]
    except KeyError:
        raise DaycloseError(f"unknown source {name!r}: expected one of {', '.join(SOURCES)}") from None
