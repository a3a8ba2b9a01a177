{#
    Events that arrived after their day's last nightly rebuild: too late for the
    window. Day D is rebuilt for the last time by the run on day D + W (W the
    source's window), which sees arrivals before D + W 00:00; anything of day D
    arriving later reaches the published numbers only through a restatement.

    One row per event date with such events (among arrivals of the last
    late_arrival_scan_days days), and whether the published numbers of that day
    still differ from the source: needs_restatement. `published` is the source's
    daily mart, `date_column` its day, `count_expression` the events it counts.
#}
{% macro late_arrival_days(source_name, published, date_column, count_expression) %}
{%- set scan_from = dayclose.as_of_day_offset(-var('late_arrival_scan_days')) -%}
{%- set too_late -%}
    received_at >= {{ dayclose.timestamp_literal(scan_from ~ ' 00:00:00') }}
    and received_at >= {{ dbt.dateadd('day', dayclose.window_days(source_name), 'event_date') }}
{%- endset -%}
{#-
    The oldest day with a too-late arrival, read before the model runs, so that the scan of
    those days' arrivals starts at a literal: engines prune by it (zone maps, an index),
    and the nightly cost follows the window, not the history.
-#}
{%- set first_candidate = scan_from -%}
{%- if execute and load_relation(ref('int_arrivals_unioned')) is not none -%}
    {%- set found = run_query(
        "select min(event_date) from " ~ ref('int_arrivals_unioned')
        ~ " where source_name = '" ~ source_name ~ "' and " ~ too_late
    ) -%}
    {%- if found.columns[0].values()[0] is not none -%}
        {%- set first_candidate = found.columns[0].values()[0] | string -%}
    {%- endif -%}
{%- endif -%}

with

published_days as (

    select * from {{ published }}

),

recent_arrivals as (

    -- each CTE reads the arrivals with its own literal filters: a CTE used twice would be
    -- materialized whole (DuckDB, Postgres) before any filter could prune it
    select
        source_name,
        event_date
    from {{ ref('int_arrivals_unioned') }}
    where source_name = '{{ source_name }}' and {{ too_late }}

),

candidate_days as (

    select distinct
        source_name,
        event_date

    from recent_arrivals

),

candidate_events as (

    -- every arrival of the candidate days, to find each event's first arrival
    select
        arrivals.source_name,
        arrivals.event_key,
        arrivals.event_date,
        min(arrivals.received_at) as first_received_at

    from {{ ref('int_arrivals_unioned') }} as arrivals
    inner join candidate_days
        on
            arrivals.source_name = candidate_days.source_name
            and arrivals.event_date = candidate_days.event_date
    where
        arrivals.source_name = '{{ source_name }}'
        and arrivals.event_at >= {{ dayclose.timestamp_literal(first_candidate[:10] ~ ' 00:00:00') }}
    group by arrivals.source_name, arrivals.event_key, arrivals.event_date

),

late_days as (

    select
        source_name,
        event_date,
        count(*) as events_in_day,
        sum(
            case
                when first_received_at >= {{ dbt.dateadd('day', dayclose.window_days(source_name), 'event_date') }}
                    then 1
                else 0
            end
        ) as events_too_late,
        max(first_received_at) as last_received_at

    from candidate_events
    group by source_name, event_date

),

published as (

    select
        published_days.{{ date_column }} as event_date,
        sum({{ count_expression }}) as events_published

    from published_days
    inner join candidate_days
        on published_days.{{ date_column }} = candidate_days.event_date
    group by published_days.{{ date_column }}

),

final as (

    select
        late_days.source_name,
        late_days.event_date,
        late_days.events_too_late,
        late_days.last_received_at,
        late_days.events_in_day as source_events,
        coalesce(published.events_published, 0) as published_events,
        late_days.events_in_day <> coalesce(published.events_published, 0) as needs_restatement

    from late_days
    left join published
        on late_days.event_date = published.event_date
    where late_days.events_too_late > 0

)

select * from final
{% endmacro %}
