"""The hand-written reconciliations: the nightly's work as one statement, from the raw lines.

Each is one CREATE TABLE ... AS SELECT over the landing's raw lines (the table the loader
fills and the nightly build starts from), doing what dayclose's models do for the window:
decode each line by the landing contract (a flat JSON object with exactly the source's
fields, each value of its kind: the rules of docs/contract.md, with the engine's own JSON functions),
validate it by the business rules, keep each event once at its first arrival, and
aggregate the window's good events per day. The bench times it and checks that its result
equals dayclose's mart for the same days, row for row.

The JSON functions differ per engine: DuckDB guards its JSON functions with json_valid;
Postgres 15 has no safe cast to json, so a line is cast only after it matched the
contract's flat-object regular expression (the same text as macros/cross_db/landing_contract.sql); `offset 0`
keeps Postgres from inlining the cast into every use of it (it re-ran the regular expression
and the cast once per field and check: minutes for 400,000 lines).
"""

from __future__ import annotations

import time
from datetime import date, datetime

WS = r"[ \t\n\r]*"
_U = (
    r"u(?:0(?:0(?:0[1-9a-fA-F]|[1-9a-fA-F][0-9a-fA-F])|[1-9a-fA-F][0-9a-fA-F]{2})|[1-9a-cA-CeEfF][0-9a-fA-F]{3}"
    r"|[dD][0-7][0-9a-fA-F]{2}|[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
)
_STRING = r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|' + _U + r'))*"'
_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_VALUE = f"(?:{_STRING}|{_NUMBER}|true|false|null)"
_MEMBER = r'"[^"\\\x00-\x1f]*"' + WS + ":" + WS + _VALUE
_DATE = (
    r"(?:[1-9][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    r"|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[1-9][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[13579][26])00)-02-29)"
)
PATTERNS = {
    "flat_object": WS + r"\{" + WS + "(?:" + _MEMBER + WS + "(?:," + WS + _MEMBER + WS + ")*)?\\}" + WS,
    "id": r'"[A-Za-z0-9_.:/-]+"',  # and at most 128 characters: _valid_token
    "timestamp": '"'
    + _DATE
    + r"[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
    + r'(?:[Zz]|[+-](?:0[0-9]|1[0-4]):[0-5][0-9])"',
    "decimal": r'"-?[0-9]{1,15}(?:\.[0-9]{1,2})?"|-?[0-9]{1,15}(?:\.[0-9]{1,2})?',
    "sequence": r"0|[1-9][0-9]*",  # and at most 19 digits: _valid_token
    "number": r"-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,15})?(?:[eE][+-]?[0-9]{1,2})?",
}

SALES_FIELDS = {
    "event_id": "id",
    "shop_id": "id",
    "sold_at": "timestamp",
    "received_at": "timestamp",
    "amount": "decimal",
}
UNITS_FIELDS = {
    "line_id": "id",
    "plc_seq": "sequence",
    "sku": "id",
    "event_at": "timestamp",
    "received_at": "timestamp",
    "verdict": "id",
    "fill_level_ml": "number",
    "capper_torque_nm": "number",
    "temperature_c": "number",
}


def _full(engine: str, expr: str, pattern: str) -> str:
    if engine == "duckdb":
        return f"regexp_full_match({expr}, '{pattern}')"
    return f"({expr} ~ '^(?:{pattern})$')"


def _valid_token(engine: str, token: str, kind: str) -> str:
    check = _full(engine, token, PATTERNS[kind])
    # lengths apart: Postgres' regex engine runs {1,128} about eight times slower than +
    if kind == "id":
        check = f"(length({token}) <= 130 and {check})"
    if kind == "sequence":  # at most 9223372036854775807
        in_range = f"(length({token}) < 19 or {token} <= '9223372036854775807')"
        check = f"(length({token}) <= 19 and {check} and {in_range})"
    return check


def _value(engine: str, token: str, kind: str) -> str:
    if kind == "id":
        return f"substr({token}, 2, length({token}) - 2)"
    if kind == "decimal":
        return f"cast(replace({token}, '\"', '') as decimal(18, 2))"
    if kind == "sequence":
        return f"cast({token} as bigint)"
    if kind == "number":
        return f"cast({token} as double precision)"
    # timestamp: to UTC
    text = f"substr({token}, 2, length({token}) - 2)"
    if engine == "duckdb":
        return f"cast(cast({text} as timestamptz) at time zone 'UTC' as timestamp)"
    return f"(cast({text} as timestamptz) at time zone 'UTC')"


def _materialized(engine: str) -> str:
    """Postgres: decode once, whatever plan follows (without it, it chose to re-run the decoding
    inside a nested loop over the reference tables)."""
    return "materialized " if engine == "postgres" else ""


def decoded_lines_sql(engine: str, raw: str, fields: dict[str, str], where: str) -> str:
    """A select of the lines of `raw` (filtered by `where`) that keep the contract, typed."""
    names = list(fields)
    keys_sorted = sorted(names)
    if engine == "duckdb":
        paths = ", ".join(f"'$.{n}'" for n in names)
        tokens = f"""
        select batch_id, file_name, line_number,
               case when is_json then json_extract(raw_line, [{paths}])::varchar[] end as t,
               case when is_json then list_sort(json_keys(raw_line)) end as keys
        from (
            select batch_id, file_name, line_number, raw_line,
                   coalesce(
                       case when json_valid(raw_line) then json_type(raw_line) = 'OBJECT' end, false
                   ) as is_json
            from {raw}
            where ({where}) and byte_error is null
        ) as objects
        where is_json"""
        key_check = "keys = [" + ", ".join(f"'{k}'" for k in keys_sorted) + "]"
        token = {n: f"t[{i + 1}]" for i, n in enumerate(names)}
    else:
        cols = ",\n               ".join(f"(j -> '{n}')::text as t_{n}" for n in names)
        tokens = f"""
        select batch_id, file_name, line_number,
               {cols},
               array(select k from json_object_keys(j) as k order by k) as keys
        from (
            select batch_id, file_name, line_number,
                   case when {_full(engine, "raw_line", PATTERNS["flat_object"])} then raw_line::json end as j
            from {raw}
            where ({where}) and byte_error is null
            offset 0
        ) as objects
        where j is not null
        offset 0"""
        key_check = "keys = array[" + ", ".join(f"'{k}'" for k in keys_sorted) + "]::text[]"
        token = {n: f"t_{n}" for n in names}
    fence = "\n        offset 0" if engine == "postgres" else ""
    checks = " and ".join(_valid_token(engine, token[n], k) for n, k in fields.items())
    # every cast only where every token passed (the engines may evaluate conditions in any order)
    values = ",\n           ".join(
        f"case when ok then {_value(engine, token[n], k)} end as {n}" for n, k in fields.items()
    )
    return f"""
    select batch_id, file_name, line_number,
           {values}
    from (
        select *, coalesce({key_check} and {checks}, false) as ok
        from ({tokens}
        ) as tokens{fence}
    ) as checked
    where ok"""


def sales_sql(
    engine: str, schema: str, table: str, start: date, end: date, as_of: datetime, max_amount: int
) -> str:
    """daily_sales of [start, end) from the raw lines of the batches arrived since `start`."""
    raw = f"{schema}_landing.sale_lines"
    complete = f"'{as_of:%Y-%m-%dT%H}'"  # a batch is complete when its arrival hour is over
    where = f"batch_id >= '{start:%Y-%m-%d}T00' and batch_id < {complete}"
    decoded = decoded_lines_sql(engine, raw, SALES_FIELDS, where)
    return f"""
create table {schema}.{table} as
with decoded as {_materialized(engine)}({decoded}
),
valid as (
    select decoded.* from decoded
    inner join {schema}_reference.shops as shops on decoded.shop_id = shops.shop_id
    where decoded.amount >= 0 and decoded.amount <= {max_amount} and decoded.sold_at <= decoded.received_at
),
ranked as (
    select *, row_number() over (
        partition by event_id order by batch_id, received_at, file_name, line_number
    ) as arrival_rank
    from valid
)
select cast(sold_at as date) as sale_date, shop_id,
       cast(sum(amount) as decimal(18, 2)) as sales_amount, count(*) as sales_count
from ranked
where arrival_rank = 1
  and sold_at >= cast('{start}' as timestamp) and sold_at < cast('{end}' as timestamp)
group by 1, 2
"""


def units_sql(engine: str, schema: str, table: str, start: date, end: date, as_of: datetime) -> str:
    """daily_good_units of [start, end) from every raw line of units loaded by `as_of`."""
    raw = f"{schema}_landing.unit_lines"
    where = f"batch_id < '{as_of:%Y-%m-%dT%H}'"
    decoded = decoded_lines_sql(engine, raw, UNITS_FIELDS, where)
    return f"""
create table {schema}.{table} as
with decoded as {_materialized(engine)}({decoded}
),
valid as (
    select decoded.line_id, decoded.plc_seq, decoded.sku, decoded.event_at, decoded.verdict,
           decoded.batch_id, decoded.received_at, decoded.file_name, decoded.line_number
    from decoded
    inner join {schema}_reference.lines as lines on decoded.line_id = lines.line_id
    inner join {schema}_reference.skus as skus on decoded.sku = skus.sku
    where decoded.verdict in ('good', 'reject')
      and decoded.event_at >= lines.commissioned_at and decoded.event_at <= decoded.received_at
),
ranked as (
    select *, row_number() over (
        partition by line_id, plc_seq order by batch_id, received_at, file_name, line_number
    ) as arrival_rank
    from valid
)
select cast(event_at as date) as production_date, sku,
       sum(case when verdict = 'good' then 1 else 0 end) as good_units,
       sum(case when verdict = 'reject' then 1 else 0 end) as rejected_units
from ranked
where arrival_rank = 1
  and event_at >= cast('{start}' as timestamp) and event_at < cast('{end}' as timestamp)
group by 1, 2
"""


def run_statement(wh, table: str, sql: str) -> float:
    """Drop `table`, run the CTAS, return its seconds."""
    wh.execute(f"drop table if exists {wh.target.schema}.{table}")
    started = time.perf_counter()
    wh.execute(sql)
    return time.perf_counter() - started


def differences(
    wh, left: str, right: str, columns: list[str], date_column: str, start: date, end: date
) -> int:
    """Rows of `left` not in `right` plus rows of `right` not in `left`, for the days [start, end)."""
    cols = ", ".join(columns)
    days = f"{date_column} >= cast('{start}' as date) and {date_column} < cast('{end}' as date)"
    return int(
        wh.scalar(
            f"select count(*) from ("
            f"(select {cols} from {left} where {days} except select {cols} from {right} where {days}) "
            f"union all "
            f"(select {cols} from {right} where {days} except select {cols} from {left} where {days})"
            f") as d"
        )
    )
