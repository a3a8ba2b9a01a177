{#
    Small SQL building blocks that render the same meaning on every engine (dbt's
    cross-database macros underneath): literals, day boundaries, differences, a spine.
#}


{# A UTC timestamp literal from 'YYYY-MM-DD HH:MM:SS'. #}
{% macro timestamp_literal(text) -%}
    cast('{{ text }}' as {{ dbt.type_timestamp() }})
{%- endmacro %}


{# Start of the day after `date_expr`, as a timestamp: the instant a day ends. #}
{% macro day_end_at(date_expr) -%}
    cast({{ dbt.dateadd('day', 1, 'cast(' ~ date_expr ~ ' as ' ~ dbt.type_timestamp() ~ ')') }} as {{ dbt.type_timestamp() }})
{%- endmacro %}


{# Whole seconds from `start_at` to `end_at`, negative when end_at is earlier. #}
{% macro seconds_between(start_at, end_at) -%}
    ({{ dbt.datediff(start_at, end_at, 'second') | trim }})
{%- endmacro %}


{# Hours from `start_at` to `end_at`, fractional, negative when end_at is earlier. #}
{% macro hours_between(start_at, end_at) -%}
    ({{ dayclose.seconds_between(start_at, end_at) }} / 3600.0)
{%- endmacro %}


{# The integers 0 .. n-1 as a column `n`, portable to any SQL engine (no generate_series). #}
{% macro integer_spine(n) -%}
    {%- set digits = (n - 1) | string | length -%}
    select n from (
        select
            {%- for i in range(digits) %}
            d{{ i }}.digit * {{ 10 ** i }}{{ ' +' if not loop.last }}
            {%- endfor %} as n
        from
            {%- for i in range(digits) %}
            (
                {%- for d in range(10) %}
                select {{ d }} as digit{{ ' union all' if not loop.last }}
                {%- endfor %}
            ) as d{{ i }}{{ ' cross join' if not loop.last }}
            {%- endfor %}
    ) as spine
    where n < {{ n }}
{%- endmacro %}


{#
    The keyword between a CTE's name and its query when the CTE should be computed once
    (`name as {{ dayclose.cte_computed_once() }} (`): Postgres inlines a CTE read once into
    its reader, where an expression read twice (a regular expression's verdict) is
    evaluated twice, so there it says `materialized`; DuckDB computes a CTE's columns once,
    in the CTE's own projection, either way, and materializing copies every row (the
    contract's four CTEs over 3 M lines: 4.6 s materialized, 3.7 s not, the same rows);
    other engines have no such keyword.
#}
{% macro cte_computed_once() -%}
    {{ return(adapter.dispatch('cte_computed_once', 'dayclose')()) }}
{%- endmacro %}

{% macro default__cte_computed_once() -%}
{%- endmacro %}

{% macro postgres__cte_computed_once() -%}
    materialized
{%- endmacro %}


{#
    A 63-bit integer hash of an event's key columns `keys`, joined by '|' as text: the first
    16 hex digits of their md5, shifted right by one bit (a non-negative bigint, the same
    value on DuckDB and Postgres). For looking events up in a whole first-arrivals registry
    by one integer column instead of their text keys. From md5 because every engine and
    version computes it the same way (an engine's own fast hash may change between
    versions, and a registry keeps its hashes for years). Two keys sharing a hash are
    harmless where it is used (registry_lookup, a first build's copied events in
    first_arrivals). Another engine gets dbt's hash (md5 text): the same use. The registry's
    stored hashes are looked up by new ones: an expression changed here needs the column
    computed again (add_event_hash).
#}
{% macro event_hash(keys) -%}
    {%- set parts = [] -%}
    {%- for k in keys -%}
        {%- do parts.append('cast(' ~ k ~ ' as ' ~ dbt.type_string() ~ ')') -%}
        {%- if not loop.last %}{% do parts.append("'|'") %}{% endif -%}
    {%- endfor -%}
    {{ return(adapter.dispatch('event_hash', 'dayclose')(dbt.concat(parts) if parts | length > 1 else parts[0])) }}
{%- endmacro %}

{% macro default__event_hash(text) -%}
    {{ dbt.hash(text) }}
{%- endmacro %}

{% macro duckdb__event_hash(text) -%}
    cast(cast('0x' || substr(md5({{ text }}), 1, 16) as ubigint) >> 1 as bigint)
{%- endmacro %}

{% macro postgres__event_hash(text) -%}
    ((('x' || substr(md5({{ text }}), 1, 16))::bit(64) >> 1)::bigint)
{%- endmacro %}


{# The SQL type of event_hash. #}
{% macro event_hash_type() -%}
    {{ return(adapter.dispatch('event_hash_type', 'dayclose')()) }}
{%- endmacro %}

{% macro default__event_hash_type() -%}
    {{ return(dbt.type_string()) }}
{%- endmacro %}

{% macro duckdb__event_hash_type() -%}
    {{ return(dbt.type_bigint()) }}
{%- endmacro %}

{% macro postgres__event_hash_type() -%}
    {{ return(dbt.type_bigint()) }}
{%- endmacro %}
