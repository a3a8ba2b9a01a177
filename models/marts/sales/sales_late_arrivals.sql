{#
    The days with sales that arrived after the day's last nightly rebuild: too late for the
    window. Day D is rebuilt for the last time by the run on day D + W (W the window), which
    sees arrivals before D + W 00:00; anything of day D arriving later reaches the published
    numbers only through a restatement (dayclose restate). One row per such day among the
    arrivals of the last late_arrival_scan_days days, and whether its published numbers still
    differ from its first arrivals: needs_restatement.

    Found without reading the history: the batch summaries name the few batches that can hold a
    too-late arrival (one that arrived W days or more after the first event day it holds), their
    first arrivals name the days, and only those days are read.
#}
{{ config(tags=['sales', 'lateness']) }}

{%- set window_days = dayclose.window_days('sales') -%}
{%- set scan_from = dayclose.as_of_day(-var('late_arrival_scan_days')) -%}

with

candidate_batches as (

    select batch_id from {{ ref('int_batches_summarized') }}
    where
        source_name = 'sales'
        and batch_completed_at <= {{ dayclose.as_of_at() }}
        and last_received_at >= cast('{{ scan_from }}' as {{ dbt.type_timestamp() }})
        and last_received_at >= {{ dbt.dateadd('day', window_days, 'first_event_date') }}

),

late_days as (

    -- the days of the too-late arrivals those batches brought
    select distinct sale_date as event_date

    from {{ ref('int_sales_deduplicated') }}
    where
        batch_id in (select batch_id from candidate_batches)
        and batch_id >= (select min(batch_id) from candidate_batches)
        and received_at >= cast('{{ scan_from }}' as {{ dbt.type_timestamp() }})
        and received_at >= {{ dbt.dateadd('day', window_days, 'sale_date') }}

),

day_events as (

    -- every event of those days, once, at its first arrival
    select
        registry.sale_date as event_date,
        registry.received_at

    from {{ ref('int_sales_deduplicated') }} as registry
    inner join late_days
        on
            registry.sale_date = late_days.event_date
            and registry.sold_at >= {{ dbt.cast('late_days.event_date', dbt.type_timestamp()) }}
            and registry.sold_at < {{ dbt.dateadd('day', 1, dbt.cast('late_days.event_date', dbt.type_timestamp())) }}

),

late_day_counts as (

    select
        event_date,
        count(*) as events_in_day,
        sum(
            case
                when received_at >= {{ dbt.dateadd('day', window_days, 'event_date') }} then 1
                else 0
            end
        ) as events_too_late,
        max(received_at) as last_received_at

    from day_events
    group by event_date

),

published as (

    -- what the mart as built holds for those days
    select
        daily_sales.sale_date as event_date,
        sum(daily_sales.sales_count) as events_published

    from {{ ref('daily_sales') }} as daily_sales
    inner join late_day_counts
        on daily_sales.sale_date = late_day_counts.event_date
    group by daily_sales.sale_date

),

final as (

    select
        'sales' as source_name,
        late_day_counts.event_date,
        late_day_counts.events_too_late,
        late_day_counts.last_received_at,
        late_day_counts.events_in_day as source_events,
        coalesce(published.events_published, 0) as published_events,
        late_day_counts.events_in_day <> coalesce(published.events_published, 0) as needs_restatement

    from late_day_counts
    left join published
        on late_day_counts.event_date = published.event_date
    where late_day_counts.events_too_late > 0

)

select * from final
