{#
    How long each event of a settled day took to arrive, counted once per day
    (macros/read_once.sql): events per source, event day and whole minute
    of delay. arrival_lateness reads its percentiles off these counts.
#}
with

first_arrivals as (

    {{ dayclose.first_arrivals_of_days(dayclose.settled_days_to_count(), within_settle_days=true) }}

),

delays as (

    select
        source_name,
        event_date,
        -- rounded up: "arrived within N minutes" stays true
        cast(ceil({{ dayclose.seconds_between('event_at', 'received_at') }} / 60.0) as integer) as delay_minutes

    from first_arrivals

),

final as (

    select
        source_name,
        event_date,
        delay_minutes,
        cast(count(*) as bigint) as events

    from delays
    group by source_name, event_date, delay_minutes

)

select * from final
