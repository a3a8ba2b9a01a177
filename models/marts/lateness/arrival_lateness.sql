{#
    Lateness per source, measured from the data, and the nightly window it
    recommends: the fewest days that cover lateness_coverage_target of events.

    A nightly run at 00:30 on day N rebuilds days N-W .. N-1 from batches
    complete by 00:00, so day D is rebuilt for the last time when it is
    (W-1)*24 hours old: a window of W days covers the events that arrive within
    (W-1)*24 hours of the end of their day.
#}
{{ config(tags=['shared', 'lateness']) }}

{%- set target = var('lateness_coverage_target') -%}
{%- set measured = [
    dayclose.as_of_day(-(var('lateness_settle_days') + var('lateness_measure_days'))),
    dayclose.as_of_day(-var('lateness_settle_days')),
] -%}

with

delays as (

    -- the counts of the measured days
    select * from {{ ref('int_arrivals_counted') }}
    where
        event_date >= cast('{{ measured[0] }}' as date)
        and event_date < cast('{{ measured[1] }}' as date)

),

curve as (

    select * from {{ ref('arrival_lateness_curve') }}

),

histogram as (

    select
        source_name,
        delay_minutes,
        sum(events) as events

    from delays
    group by source_name, delay_minutes

),

cumulative as (

    select
        source_name,
        delay_minutes,
        sum(events) over (
            partition by source_name order by delay_minutes rows between unbounded preceding and current row
        ) as events_within,
        sum(events) over (partition by source_name) as events_measured

    from histogram

),

percentiles as (

    -- the shortest delay within which the share p of events arrived (percentile_disc)
    select
        source_name,
        cast(max(events_measured) as bigint) as events_measured,
        cast(
            min(case when events_within >= 0.5 * events_measured then delay_minutes end) / 60.0 as decimal(18, 6)
        ) as delay_p50_hours,
        cast(
            min(case when events_within >= 0.9 * events_measured then delay_minutes end) / 60.0 as decimal(18, 6)
        ) as delay_p90_hours,
        cast(
            min(case when events_within >= 0.99 * events_measured then delay_minutes end) / 60.0 as decimal(18, 6)
        ) as delay_p99_hours,
        cast(
            min(case when events_within >= 0.999 * events_measured then delay_minutes end) / 60.0 as decimal(18, 6)
        ) as delay_p999_hours,
        cast(max(delay_minutes) / 60.0 as decimal(18, 6)) as delay_max_hours

    from cumulative
    group by source_name

),

window_coverage as (

    -- share covered by a window of W days: the curve at age (W-1)*24 hours
    select
        source_name,
        cast(age_hours / 24 as integer) + 1 as window_days,
        share_arrived

    from curve
    where mod(age_hours, 24) = 0

),

recommended as (

    select
        source_name,
        min(window_days) as recommended_window_days

    from window_coverage
    where share_arrived >= {{ target }}
    group by source_name

),

configured as (

    select
        percentiles.source_name,
        case percentiles.source_name
            {%- for source_name in var('landing_sources') %}
                when '{{ source_name }}' then {{ dayclose.window_days(source_name) }}
            {%- endfor %}
        end as configured_window_days

    from percentiles

),

final as (

    select
        percentiles.source_name,
        cast('{{ measured[0] }}' as date) as measured_from_date,
        cast('{{ measured[1] }}' as date) as measured_to_date,
        percentiles.events_measured,
        percentiles.delay_p50_hours,
        percentiles.delay_p90_hours,
        percentiles.delay_p99_hours,
        percentiles.delay_p999_hours,
        percentiles.delay_max_hours,
        configured.configured_window_days,
        covered.share_arrived as configured_window_share,
        recommended.recommended_window_days,
        {{ target }} as coverage_target,
        coalesce(covered.share_arrived >= {{ target }}, false) as is_window_sufficient

    from percentiles
    inner join configured
        on percentiles.source_name = configured.source_name
    left join window_coverage as covered
        on
            configured.source_name = covered.source_name
            and configured.configured_window_days = covered.window_days
    left join recommended
        on percentiles.source_name = recommended.source_name

)

select * from final
