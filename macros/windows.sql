{#
    The days a run rebuilds: the nightly window of a source, or a restatement's range.
#}


{# [from, to) 'YYYY-MM-DD' of the days this run rebuilds: the shim's vars, else the source's window. #}
{% macro rebuilt_range(source_name) -%}
    {%- set start = dayclose.run_var('rebuilt_from') or dayclose.as_of_day_offset(-dayclose.window_days(source_name)) -%}
    {%- set end = dayclose.run_var('rebuilt_to') or dayclose.as_of_day_offset(0) -%}
    {{- return([start, end]) -}}
{%- endmacro %}


{#
    The days [rebuilt_from, rebuilt_to) of a source as a one-column relation
    (`calendar_date`), for gates that must look at every day, also the empty ones.
#}
{% macro rebuilt_days(source_name) %}
    {%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
    {%- set first_day = modules.datetime.date.fromisoformat(rebuilt[0]) -%}
    {%- set day_count = (modules.datetime.date.fromisoformat(rebuilt[1]) - first_day).days -%}
    select cast({{ dbt.dateadd('day', 'n', "cast('" ~ rebuilt[0] ~ "' as date)") }} as date) as calendar_date
    from ({{ dayclose.integer_spine([day_count, 1] | max) }}) as day_numbers
    where n < {{ day_count }}
{% endmacro %}


{#
    The `begin` of the daily microbatch models: the first day a build reads when dayclose
    does not give it days (plain dbt, a first build or a full refresh): late_arrival_scan_days
    before the as-of day, never a fixed date years back. dayclose's own runs always pass
    the days to build (--event-time-start/--event-time-end), from the first day with data.
#}
{% macro microbatch_begin() %}
    {{ return(dayclose.as_of_day_offset(-var('late_arrival_scan_days'))) }}
{% endmacro %}


{#
    The config of a daily microbatch model of a source: each nightly run rebuilds the
    source's window, day by day, each day overwritten whole (microbatch_overwrite.sql).
    In the model: {{ config(**dayclose.daily_microbatch('sales', 'sale_date')) }}
#}
{% macro daily_microbatch(source_name, event_time) %}
    {{ return({
        'materialized': 'incremental',
        'incremental_strategy': 'microbatch',
        'event_time': event_time,
        'batch_size': 'day',
        'begin': dayclose.microbatch_begin(),
        'lookback': dayclose.window_days(source_name),
        'on_schema_change': 'fail',
        'tags': [source_name],
    }) }}
{% endmacro %}


{#
    The config of a model of a source rebuilt per run over the days the run rebuilds
    (rebuilt_range) in one statement, not day by day: a pre_hook deletes the rows of those
    days and the model's select, limited to them, inserts them again, in one transaction,
    so each day is overwritten whole and a reader sees the old days or the new ones. For
    models whose every day needs a look-up in the whole history (conflicting copies: a copy
    may come months after its first arrival), where one look-up per day would make the
    nightly cost grow with the history. In the model:
    {{ config(**dayclose.rebuilt_days_incremental('sales', 'sale_date')) }}
#}
{% macro rebuilt_days_incremental(source_name, event_date) %}
    {{ return({
        'materialized': 'incremental',
        'incremental_strategy': 'append',
        'event_time': event_date,
        'pre_hook': "{{ dayclose.delete_rebuilt_days('" ~ source_name ~ "', '" ~ event_date ~ "') }}",
        'on_schema_change': 'fail',
        'tags': [source_name],
    }) }}
{% endmacro %}


{# pre_hook of a rebuilt_days_incremental model: delete its rows of the days this run rebuilds. #}
{% macro delete_rebuilt_days(source_name, event_date) %}
    {%- if is_incremental() -%}
        {%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
        delete from {{ this }}
        where {{ event_date }} >= cast('{{ rebuilt[0] }}' as date) and {{ event_date }} < cast('{{ rebuilt[1] }}' as date)
    {%- endif -%}
{% endmacro %}


{#
    SQL condition: `event_at` (a timestamp column) is in the days this run rebuilds. With
    `built=true`, in the days the model being built covers: the same, but on a first build or
    a full refresh from the microbatch models' begin at the latest (as they do), so that a
    plain `dbt build --full-refresh` does not leave a rebuilt_days_incremental model with the
    window's days only.
#}
{% macro in_rebuilt_days(source_name, event_at, built=false) -%}
    {%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
    {%- set first_day = rebuilt[0] -%}
    {%- if built and not is_incremental() -%}
        {%- set first_day = [first_day, dayclose.microbatch_begin()] | min -%}
    {%- endif -%}
    {{ event_at }} >= {{ dayclose.timestamp_literal(first_day ~ ' 00:00:00') }}
    and {{ event_at }} < {{ dayclose.timestamp_literal(rebuilt[1] ~ ' 00:00:00') }}
{%- endmacro %}
