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
{%- set window_days = dayclose.window_days(source_name) -%}
{%- set summaries = ref('int_batches_summarized') -%}
{%- set too_late -%}
    received_at >= {{ dayclose.timestamp_literal(scan_from ~ ' 00:00:00') }}
    and received_at >= {{ dbt.dateadd('day', window_days, 'event_date') }}
{%- endset -%}
{#-
    Read before the model runs, from the batch summaries: the batches that can hold a
    too-late arrival (one arrived `window_days` or more after the first event day it
    holds), then the event days of the too-late arrivals they hold. Only those days'
    arrivals are read, so the nightly cost follows the window, not the history.
-#}
{%- set late_days_found = [] -%}
{%- if execute and load_relation(summaries) is not none -%}
    {%- set candidates = run_query(
        "select batch_id from " ~ summaries
        ~ " where source_name = '" ~ source_name ~ "'"
        ~ " and batch_completed_at <= " ~ dayclose.as_of_at()
        ~ " and last_received_at >= " ~ dayclose.timestamp_literal(scan_from ~ ' 00:00:00')
        ~ " and last_received_at >= " ~ dbt.dateadd('day', window_days, 'first_event_date')
    ).columns[0].values() -%}
    {%- if candidates | length > 0 -%}
        {%- set found = run_query(
            "select distinct cast(event_date as " ~ dbt.type_string() ~ ") from ("
            ~ dayclose.source_arrivals(source_name) ~ ") as arrivals"
            ~ " where " ~ dayclose.in_batches({source_name: candidates | list}) ~ " and " ~ too_late
        ) -%}
        {%- for row in found -%}
            {%- do late_days_found.append(row[0][:10]) -%}
        {%- endfor -%}
    {%- endif -%}
{%- endif -%}

with

published_days as (

    select * from {{ published }}

),

candidate_events as (

    -- every event of the days with too-late arrivals, once, at its first arrival
    {{ dayclose.first_arrivals_of_days({source_name: late_days_found | sort}) }}

),

late_days as (

    select
        source_name,
        event_date,
        count(*) as events_in_day,
        sum(
            case
                when received_at >= {{ dbt.dateadd('day', window_days, 'event_date') }}
                    then 1
                else 0
            end
        ) as events_too_late,
        max(received_at) as last_received_at

    from candidate_events
    group by source_name, event_date

),

published as (

    select
        published_days.{{ date_column }} as event_date,
        sum({{ count_expression }}) as events_published

    from published_days
    inner join late_days
        on published_days.{{ date_column }} = late_days.event_date
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
