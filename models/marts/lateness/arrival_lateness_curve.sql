{#
    The cumulative share of a day's events that had arrived by each age of the
    day (hours after the day ended), per source, over the measured days: the
    sum of their counts in int_arrivals_counted.
#}
{{ config(tags=['shared', 'lateness']) }}

{%- set max_age_hours = 24 * 14 -%}
{%- set measured = [
    dayclose.as_of_day(-(var('lateness_settle_days') + var('lateness_measure_days'))),
    dayclose.as_of_day(-var('lateness_settle_days')),
] -%}

with

age_counts as (

    -- the counts of the measured days
    select * from {{ ref('int_arrivals_counted') }}
    where
        event_date >= cast('{{ measured[0] }}' as date)
        and event_date < cast('{{ measured[1] }}' as date)

),

hours as (

    {{ dayclose.integer_spine(max_age_hours + 1) }}

),

histogram as (

    select
        source_name,
        case
            when age_hours < 0 then -1
            when age_hours >= {{ max_age_hours }} then {{ max_age_hours }}
            else age_hours
        end as age_bucket,
        sum(events) as events

    from age_counts
    group by
        source_name,
        case
            when age_hours < 0 then -1
            when age_hours >= {{ max_age_hours }} then {{ max_age_hours }}
            else age_hours
        end

),

totals as (

    select
        source_name,
        sum(events) as events_measured

    from histogram
    group by source_name

),

cumulative as (

    select
        histogram.source_name,
        hours.n as age_hours,
        sum(case when histogram.age_bucket < hours.n then histogram.events else 0 end)
            as events_arrived

    from histogram
    cross join hours
    group by histogram.source_name, hours.n

),

final as (

    select
        cumulative.source_name,
        cumulative.age_hours,
        cast(cumulative.events_arrived as bigint) as events_arrived,
        cast(totals.events_measured as bigint) as events_measured,
        cast(cumulative.events_arrived as {{ dbt.type_numeric() }})
        / totals.events_measured as share_arrived,
        cast('{{ measured[0] }}' as date) as measured_from_date,
        cast('{{ measured[1] }}' as date) as measured_to_date

    from cumulative
    inner join totals
        on cumulative.source_name = totals.source_name

)

select * from final
