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
    source's window, each day overwritten whole (microbatch_overwrite.sql), in batches of
    microbatch_batch_size(); a model whose figures for a day depend on how the rows are cut
    into batches (a run of equal readings is counted within its batch) passes
    batch_size='day'. In the model: {{ config(**dayclose.daily_microbatch('sales', 'sale_date')) }}
#}
{% macro daily_microbatch(source_name, event_time, batch_size=none) %}
    {{ return({
        'materialized': 'incremental',
        'incremental_strategy': 'microbatch',
        'event_time': event_time,
        'batch_size': batch_size or dayclose.microbatch_batch_size(),
        'begin': dayclose.microbatch_begin(),
        'lookback': dayclose.window_days(source_name),
        'on_schema_change': 'fail',
        'tags': [source_name],
    }) }}
{% endmacro %}


{#
    The batch size of the daily microbatch models: `day`, dbt's unit and plain dbt's, or
    `month`, which dayclose's runs set (DAYCLOSE_BATCH_SIZE, read when dbt parses the
    models). dbt runs each batch as statements of their own and spends about 0.1 s of
    Python on each, whatever its size: in a first build of 120 days daily_sales took 10 to
    13 s in 120 day batches, 0.6 to 1.1 s in 4 month batches. dbt aligns a month batch to
    the calendar, so it can reach before the first day a run rebuilds or after its last:
    the models read and the overwrite replaces only the days of the batch the run rebuilds
    (batch_days), so a day is built and overwritten whole exactly as by its own day batch.
#}
{% macro microbatch_batch_size() %}
    {%- set size = env_var('DAYCLOSE_BATCH_SIZE', 'day') -%}
    {%- if size not in ('day', 'month') -%}
        {{ exceptions.raise_compiler_error(
            "DAYCLOSE_BATCH_SIZE is '" ~ size ~ "': expected day or month (the batch size of the daily microbatch models)"
        ) }}
    {%- endif -%}
    {{ return(size) }}
{% endmacro %}


{#
    ['YYYY-MM-DD', 'YYYY-MM-DD'): the days of the current microbatch batch this run
    rebuilds (the batch cut to the source's rebuilt_range; the source named, else the one
    daily_microbatch tagged the model with), or none when a batch is a day (every day of a
    day batch is rebuilt) or outside a batch. Both bounds equal when the batch holds no
    rebuilt day.
#}
{% macro batch_days(source_name=none) %}
    {%- set batch = model.get('batch') if execute else none -%}
    {%- if not batch or config.get('batch_size') == 'day' -%}
        {{ return(none) }}
    {%- endif -%}
    {%- if source_name is none -%}
        {#- the model's source: daily_microbatch tags the model with it -#}
        {%- set tagged = dayclose.landing_sources() | select('in', model.tags) | list -%}
        {%- if tagged | length != 1 -%}
            {{ exceptions.raise_compiler_error(
                "microbatch model " ~ model.name ~ " in " ~ config.get('batch_size') ~ " batches needs one "
                ~ "landing source among its tags (daily_microbatch sets it), found " ~ (tagged | join(', ') or 'none')
            ) }}
        {%- endif -%}
        {%- set source_name = tagged[0] -%}
    {%- endif -%}
    {%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
    {%- set first = [batch.get('event_time_start').strftime('%Y-%m-%d'), rebuilt[0]] | max -%}
    {%- set last = [batch.get('event_time_end').strftime('%Y-%m-%d'), rebuilt[1]] | min -%}
    {{ return([first, [first, last] | max]) }}
{% endmacro %}


{#
    SQL condition for a microbatch model's select: `column` (a date or timestamp: the
    model's day, or its input's event time) is in a day of the batch this run rebuilds
    (batch_days); true with day batches.
#}
{% macro in_batch_days(source_name, column) -%}
    {%- set days = dayclose.batch_days(source_name) -%}
    {%- if days is none -%}
    1 = 1
    {%- else -%}
    {{ column }} >= {{ dayclose.timestamp_literal(days[0] ~ ' 00:00:00') }}
    and {{ column }} < {{ dayclose.timestamp_literal(days[1] ~ ' 00:00:00') }}
    {%- endif -%}
{%- endmacro %}


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
