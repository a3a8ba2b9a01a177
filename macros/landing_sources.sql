{#
    The registry of landing sources on the dbt side: the project variable
    landing_sources (dbt_project.yml) names each source, its nightly window and the
    model of its validated lines, and how an event is keyed and timed there. The
    Python side of the registry is dayclose/sources.py.
#}


{# The names of the registered landing sources, in a stable order. #}
{% macro landing_sources() %}
    {{ return(var('landing_sources').keys() | sort) }}
{% endmacro %}


{# The registry entry of a source (a dict), or a compiler error naming the known sources. #}
{% macro landing_source(source_name) %}
    {%- set registry = var('landing_sources') -%}
    {%- if source_name not in registry -%}
        {{ exceptions.raise_compiler_error(
            "unknown landing source " ~ source_name ~ "; registered: " ~ (registry.keys() | sort | join(', '))
        ) }}
    {%- endif -%}
    {{ return(registry[source_name]) }}
{% endmacro %}


{#
    The nightly window of a source in days: the variable <source>_window_days when set
    (e.g. --vars '{sales_window_days: 2}'), else its landing_sources entry.
#}
{% macro window_days(source_name) %}
    {{ return(var(source_name ~ '_window_days', dayclose.landing_source(source_name)['window_days'])) }}
{% endmacro %}


{# SQL: the configured window of the source named in `source_column`. #}
{% macro window_days_of(source_column) -%}
    case {{ source_column }}
        {%- for name in dayclose.landing_sources() %}
        when '{{ name }}' then {{ dayclose.window_days(name) }}
        {%- endfor %}
    end
{%- endmacro %}


{#
    Every valid event of one landing source once, at its first arrival, reduced to what
    lateness is measured from: a select of (source_name, batch_id, event_key, event_at,
    received_at, event_date) over the source's events_model, event_key the source's
    stable event id as text (key columns joined by '/'). A source whose events model was
    never built (its job has not run in this warehouse) has no arrivals yet.

    Read one source at a time, never through a union of all sources: Postgres does
    not flatten such a union when the branches' types differ, and then plans a
    parallel scan of a branch that the filter rules out, starting its workers for
    nothing (seconds each on a loaded machine).
#}
{% macro source_arrivals(source_name) %}
    {%- set entry = dayclose.landing_source(source_name) -%}
    {%- set events = ref(entry['events_model']) -%}
    {%- if execute and load_relation(events) is none -%}
        {{ return(dayclose.no_arrivals()) }}
    {%- endif -%}
    {%- set key_parts = [] -%}
    {%- for column in entry['event_key'] -%}
        {%- do key_parts.append(dbt.cast(column, dbt.type_string())) -%}
        {%- if not loop.last %}{% do key_parts.append("'/'") %}{% endif -%}
    {%- endfor %}
    select
        '{{ source_name }}' as source_name,
        batch_id,
        {{ key_parts[0] if key_parts | length == 1 else dbt.concat(key_parts) }} as event_key,
        {{ entry['event_at'] }} as event_at,
        received_at,
        {{ entry['event_date'] }} as event_date
    from {{ events }}
{% endmacro %}


{#
    The columns of source_arrivals and no rows, read from nothing: what a model renders
    when it has nothing to read, so that no engine starts a scan (or parallel workers)
    for it. It depends on every source's events all the same, so dbt orders the model
    after them whatever it reads when it runs.
#}
{% macro no_arrivals() %}
    {%- for source_name in dayclose.landing_sources() -%}
        {%- do ref(dayclose.landing_source(source_name)['events_model']) -%}
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


{#
    How far each source's events model has registered the landing: {source_name:
    'YYYY-MM-DD HH:MM:SS'}, the end of the latest batch that brought a first arrival.
    Sources whose events model does not exist yet are missing. Empty while parsing.
#}
{% macro events_registered_through() %}
    {%- set through = {} -%}
    {%- if execute -%}
        {%- for source_name in dayclose.landing_sources() -%}
            {%- set events = ref(dayclose.landing_source(source_name)['events_model']) -%}
            {%- if load_relation(events) is not none -%}
                {%- set value = run_query(dayclose.registered_through_sql(events)).columns[0].values()[0] -%}
                {%- if value -%}
                    {%- do through.update({source_name: value[:19]}) -%}
                {%- endif -%}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ return(through) }}
{% endmacro %}


{#
    SQL: the end of the latest batch in a first-arrivals registry (text). Postgres reads it
    through the registry's index on batch_id: a batch ends one hour after its arrival hour,
    which is its id, so the latest batch has the greatest id. `max(batch_completed_at)`
    there scanned the whole registry (0.8 s at 120 days of history, 3 nodes a night).
#}
{% macro registered_through_sql(events) -%}
    {{ return(adapter.dispatch('registered_through_sql', 'dayclose')(events)) }}
{%- endmacro %}

{% macro default__registered_through_sql(events) -%}
    select cast(max(batch_completed_at) as {{ dbt.type_string() }}) from {{ events }}
{%- endmacro %}

{% macro postgres__registered_through_sql(events) -%}
    select cast(max(batch_completed_at) as {{ dbt.type_string() }}) from {{ events }}
    where batch_id = (select max(batch_id) from {{ events }})
{%- endmacro %}
