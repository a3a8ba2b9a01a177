{#
    The landing sources and their nightly windows. A source's window is the
    project variable <source>_window_days: how many days before the as-of day a
    nightly run rebuilds.
#}

{% macro landing_sources() %}
    {{ return(['sales', 'units']) }}
{% endmacro %}


{% macro window_days(source_name) %}
    {{ return(var(source_name ~ '_window_days')) }}
{% endmacro %}


{# SQL: the configured window of the source named in `source_column`. #}
{% macro window_days_of(source_column) -%}
    case {{ source_column }}
        {%- for name in dayclose.landing_sources() %}
        when '{{ name }}' then {{ dayclose.window_days(name) }}
        {%- endfor %}
    end
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


{# [from, to) 'YYYY-MM-DD' of the days this run rebuilds: the shim's vars, else the source's window. #}
{% macro rebuilt_range(source_name) -%}
    {%- set start = dayclose.run_var('rebuilt_from') or dayclose.as_of_day_offset(-dayclose.window_days(source_name)) -%}
    {%- set end = dayclose.run_var('rebuilt_to') or dayclose.as_of_day_offset(0) -%}
    {{- return([start, end]) -}}
{%- endmacro %}


{#
    Every valid event of one landing source, reduced to what lateness is measured
    from: a select of (source_name, batch_id, event_key, event_at, received_at,
    event_date), event_key the source's stable event id. A new source adds a branch
    here and its name to landing_sources().

    Read one source at a time, never through a union of all sources: Postgres does
    not flatten such a union when the branches' types differ, and then plans a
    parallel scan of a branch that the filter rules out, starting its workers for
    nothing (seconds each on a loaded machine).
#}
{% macro source_arrivals(source_name) %}
    {%- if source_name == 'sales' %}
    select
        'sales' as source_name,
        batch_id,
        event_id as event_key,
        sold_at as event_at,
        received_at,
        sale_date as event_date
    from {{ ref('int_sale_lines_validated') }}
    where is_valid
    {%- elif source_name == 'units' %}
    select
        'units' as source_name,
        batch_id,
        {{ dbt.concat(["line_id", "'/'", dbt.cast("plc_seq", dbt.type_string())]) }} as event_key,
        event_at,
        received_at,
        production_date as event_date
    from {{ ref('int_unit_lines_validated') }}
    where is_valid
    {%- else -%}
        {{ exceptions.raise_compiler_error("unknown landing source " ~ source_name) }}
    {%- endif %}
{% endmacro %}


{#
    The columns of source_arrivals and no rows, read from nothing: what a model renders
    when it has nothing to read, so that no engine starts a scan (or parallel workers)
    for it. It depends on every source's arrivals all the same, so dbt orders the model
    after them whatever it reads when it runs.
#}
{% macro no_arrivals() %}
    {%- for source_name in dayclose.landing_sources() -%}
        {%- do dayclose.source_arrivals(source_name) -%}
    {%- endfor %}
    select
        cast(null as {{ dbt.type_string() }}) as source_name,
        cast(null as {{ dbt.type_string() }}) as batch_id,
        cast(null as {{ dbt.type_string() }}) as event_key,
        cast(null as {{ dbt.type_timestamp() }}) as event_at,
        cast(null as {{ dbt.type_timestamp() }}) as received_at,
        cast(null as date) as event_date
    where 1 = 0
{% endmacro %}
