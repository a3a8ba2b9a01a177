{#
    Warns when a plant's dead-lettered lines on the last complete arrival day
    rise above dead_letter_rise_factor times its mean of the 7 days before (and
    above dead_letter_rise_min): a rising dead-letter count is itself a signal
    that a sensor or an export is failing.
#}
{{ config(tags=['gate', 'units'], severity='warn') }}

{%- set last_day = dayclose.as_of_day(-1) -%}
{%- set since = dayclose.as_of_day(-8) -%}

with

dead_letters as (

    select * from {{ ref('units_dead_letters') }}
    where
        batch_completed_at > cast('{{ since }}' as {{ dbt.type_timestamp() }})
        and batch_completed_at <= cast('{{ dayclose.as_of_day() }}' as {{ dbt.type_timestamp() }})

),

per_day as (

    select
        plant_id,
        cast({{ dbt.dateadd('hour', -1, 'batch_completed_at') }} as date) as arrival_date,
        count(*) as dead_letters

    from dead_letters
    group by plant_id, cast({{ dbt.dateadd('hour', -1, 'batch_completed_at') }} as date)

),

last_day as (

    select * from per_day
    where arrival_date = cast('{{ last_day }}' as date)

),

trailing_days as (

    select
        plant_id,
        sum(dead_letters) / 7.0 as mean_dead_letters

    from per_day
    where arrival_date < cast('{{ last_day }}' as date)
    group by plant_id

),

final as (

    select
        last_day.plant_id,
        last_day.dead_letters,
        coalesce(trailing_days.mean_dead_letters, 0) as trailing_mean

    from last_day
    left join trailing_days
        on last_day.plant_id = trailing_days.plant_id
    where
        last_day.dead_letters > {{ var('dead_letter_rise_min') }}
        and last_day.dead_letters > {{ var('dead_letter_rise_factor') }} * coalesce(trailing_days.mean_dead_letters, 0)

)

select * from final
