{#
    How old each settled day was when its events arrived, counted once per day
    (macros/read_once.sql): events per source, event day and whole hour of
    the day's age at arrival. arrival_lateness_curve adds these up.
#}
with

first_arrivals as (

    {{ dayclose.first_arrivals_of_days(dayclose.settled_days_to_count(), within_settle_days=true) }}

),

ages as (

    select
        source_name,
        event_date,
        -- rounded down: the hour of the day's age the event arrived in; negative while the day ran
        cast(
            floor({{ dayclose.hours_between(dayclose.day_end_at('event_date'), 'received_at') }}) as integer
        ) as age_hours

    from first_arrivals

),

final as (

    select
        source_name,
        event_date,
        age_hours,
        cast(count(*) as bigint) as events

    from ages
    group by source_name, event_date, age_hours

)

select * from final
