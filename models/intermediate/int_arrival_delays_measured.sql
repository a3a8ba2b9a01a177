{#
    The settled days lateness is measured on: event dates at least
    lateness_settle_days old (late events have had time to arrive), over
    lateness_measure_days days. One row per event, its first arrival.
#}
{{ config(tags=['sales', 'units', 'lateness']) }}

{%- set settle = var('lateness_settle_days') -%}
{%- set measured_from = dayclose.as_of_day_offset(-(settle + var('lateness_measure_days'))) -%}
{%- set measured_to = dayclose.as_of_day_offset(-settle) -%}

with

arrivals as (

    select * from {{ ref('int_arrivals_unioned') }}
    where
        event_at >= {{ dayclose.timestamp_literal(measured_from ~ ' 00:00:00') }}
        and event_at < {{ dayclose.timestamp_literal(measured_to ~ ' 00:00:00') }}

),

first_arrivals as (

    select
        source_name,
        event_key,
        min(event_at) as event_at,
        min(event_date) as event_date,
        min(received_at) as received_at

    from arrivals
    group by source_name, event_key

),

final as (

    select
        source_name,
        event_key,
        event_at,
        event_date,
        received_at,
        {{ dayclose.hours_between('event_at', 'received_at') }} as delay_hours,
        {{ dayclose.hours_between(dayclose.day_end_at('event_date'), 'received_at') }}
            as age_at_arrival_hours,
        cast('{{ measured_from }}' as date) as measured_from_date,
        cast('{{ measured_to }}' as date) as measured_to_date

    from first_arrivals

)

select * from final
