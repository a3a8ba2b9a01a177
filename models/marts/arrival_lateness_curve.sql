{#
    The cumulative share of a day's events that had arrived by each age of the
    day (hours after the day ended), per source, measured on settled days.
#}
{{ config(tags=['sales', 'units', 'lateness']) }}

{%- set max_age_hours = 24 * 14 -%}

with

delays as (

    select * from {{ ref('int_arrival_delays_measured') }}

),

hours as (

    {{ dayclose.integer_spine(max_age_hours + 1) }}

),

age_buckets as (

    select
        source_name,
        case
            when age_at_arrival_hours < 0 then -1
            when age_at_arrival_hours >= {{ max_age_hours }} then {{ max_age_hours }}
            else cast(floor(age_at_arrival_hours) as integer)
        end as age_bucket

    from delays

),

histogram as (

    select
        source_name,
        age_bucket,
        count(*) as events

    from age_buckets
    group by source_name, age_bucket

),

totals as (

    select
        source_name,
        count(*) as events_measured,
        min(measured_from_date) as measured_from_date,
        min(measured_to_date) as measured_to_date

    from delays
    group by source_name

),

cumulative as (

    select
        totals.source_name,
        hours.n as age_hours,
        sum(case when histogram.age_bucket < hours.n then histogram.events else 0 end)
            as events_arrived

    from totals
    cross join hours
    inner join histogram
        on totals.source_name = histogram.source_name
    group by totals.source_name, hours.n

),

final as (

    select
        cumulative.source_name,
        cumulative.age_hours,
        cumulative.events_arrived,
        totals.events_measured,
        cast(cumulative.events_arrived as {{ dbt.type_numeric() }})
        / totals.events_measured as share_arrived,
        totals.measured_from_date,
        totals.measured_to_date

    from cumulative
    inner join totals
        on cumulative.source_name = totals.source_name

)

select * from final
