{#
    What this run is: its as-of instant, its data cutoff and the per-run values the
    shim passes. Every *_at value is a UTC timestamp without time zone; every *_date a
    UTC calendar date.
#}


{#
    A per-run value (as_of, rebuilt_from, rebuilt_to, run_id, restate_reason): the
    --vars of a dbt CLI user, else DAYCLOSE_RUN_<NAME>, which the shim sets for each
    invocation. The environment is read only when executing: dbt re-parses the whole
    project whenever --vars change, and a new run must not cost a new parse.
#}
{% macro run_var(name) -%}
    {%- set value = var(name, '') -%}
    {%- if not value and execute -%}
        {%- set value = env_var('DAYCLOSE_RUN_' ~ (name | upper), '') -%}
    {%- endif -%}
    {{- return(value) -}}
{%- endmacro %}


{# The run's as-of instant as text: the shim's value, else the invocation time (UTC). #}
{% macro as_of_text() -%}
    {%- set value = dayclose.run_var('as_of') -%}
    {%- if value -%}
        {{- return(value) -}}
    {%- else -%}
        {{- return(run_started_at.strftime('%Y-%m-%d %H:%M:%S')) -}}
    {%- endif -%}
{%- endmacro %}


{# The as-of instant as a SQL timestamp. #}
{% macro as_of_at() -%}
    {{ dayclose.timestamp_literal(dayclose.as_of_text()) }}
{%- endmacro %}


{# 'YYYY-MM-DD' of the as-of day shifted by `days` (negative: earlier). #}
{% macro as_of_day_offset(days) -%}
    {%- set day = modules.datetime.datetime.strptime(dayclose.as_of_text()[:10], '%Y-%m-%d') -%}
    {{- return((day + modules.datetime.timedelta(days=days)).strftime('%Y-%m-%d')) -}}
{%- endmacro %}


{# The as-of instant floored to the hour: batches are arrival hours, so this is the data cutoff. #}
{% macro data_cutoff_at() -%}
    {{ dayclose.timestamp_literal(dayclose.as_of_text()[:13] ~ ':00:00') }}
{%- endmacro %}


{# When this dbt invocation started (UTC), as a SQL timestamp: a wall-clock stamp for audit columns. #}
{% macro invocation_at() -%}
    {{ dayclose.timestamp_literal(run_started_at.strftime('%Y-%m-%d %H:%M:%S')) }}
{%- endmacro %}


{#
    on-run-start: plain `dbt build` (or run, test) needs what dayclose loads: with no
    landing tables yet it stops with one message saying so, instead of an error per model.
    `dbt compile`, `dbt docs generate` and `dbt seed` work on an empty warehouse.
#}
{% macro require_landing() %}
    {%- if execute and flags.WHICH in ('build', 'run', 'test', 'retry') -%}
        {%- set ledger = adapter.get_relation(
            database=target.database, schema=target.schema ~ '_landing', identifier='load_ledger'
        ) -%}
        {%- if ledger is none -%}
            {{ exceptions.raise_compiler_error(
                "no landing tables in schema " ~ target.schema ~ "_landing: dbt builds on the batches "
                ~ "dayclose loads. Load them first (dayclose run sales --landing <folder>, and units), "
                ~ "then plain dbt works on its own; see the README, 'Plain dbt'."
            ) }}
        {%- endif -%}
    {%- endif -%}
{% endmacro %}


{#
    SQL select of what had arrived, in complete batches, by the run's as-of instant: the
    rows of `relation` (with batch_completed_at) a run as of T may count.
#}
{% macro known_as_of(relation) -%}
    select * from {{ relation }}
    where batch_completed_at <= {{ dayclose.as_of_at() }}
{%- endmacro %}
