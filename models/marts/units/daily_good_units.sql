{#
    Good units per SKU and production day (the PLC's clock), for finance. Each nightly run
    rebuilds the last units_window_days days, each day overwritten whole; a unit (line_id,
    plc_seq) counts once, at its first arrival, however often it was replayed; the count is the
    PLC's verdict, whatever the sensors said. Each row tells readers how far to trust its day:
    can_still_change, expected_share_complete, age_hours, built_as_of.
#}
{#- Spark: dbt-spark's microbatch overwrites the batch's day partitions (dynamic partition overwrite);
    the pre_hook drops the run's rebuilt days first: a day the select no longer returns keeps none -#}
{{
    config(
        materialized='incremental',
        incremental_strategy='microbatch',
        event_time='production_date',
        partition_by='production_date' if target.type == 'spark' else none,
        pre_hook="{{ dayclose.delete_rebuilt_days('units', 'production_date') if target.type == 'spark' }}",
        batch_size=dayclose.microbatch_batch_size(),
        begin=dayclose.microbatch_begin(),
        lookback=dayclose.window_days('units'),
        on_schema_change='fail',
        tags=['units'],
    )
}}

{%- set rebuilt = dayclose.rebuilt_range('units') -%}
{%- set first_changeable = dayclose.as_of_day(1 - dayclose.window_days('units')) -%}

with

line_sku_days as (

    -- dbt limits this to the batch's days (the event_time of the ref); of those, the days
    -- this run rebuilds (a month batch reaches beyond them)
    select * from {{ ref('int_line_sku_days_counted') }}
    where
        production_date >= cast('{{ rebuilt[0] }}' as date)
        and production_date < cast('{{ rebuilt[1] }}' as date)

),

lateness_curve as (

    select * from {{ ref('arrival_lateness_curve') }}
    where source_name = 'units'

),

sku_days as (

    select
        production_date,
        sku,
        cast(sum(good_units) as bigint) as good_units,
        cast(sum(rejected_units) as bigint) as rejected_units,
        cast(sum(good_units_with_sensor_flags) as bigint) as good_units_with_sensor_flags

    from line_sku_days
    group by production_date, sku

),

aged as (

    -- hours from the end of the day to the run's data cutoff
    select
        *,
        {{ dbt.datediff(
            dbt.dateadd('day', 1, dbt.cast('production_date', dbt.type_timestamp())),
            dayclose.data_cutoff_at(),
            'second'
        ) }} / 3600.0 as day_age_hours

    from sku_days

),

final as (

    select
        aged.production_date,
        aged.sku,
        aged.good_units,
        aged.rejected_units,
        aged.good_units_with_sensor_flags,
        aged.production_date >= cast('{{ first_changeable }}' as date) as can_still_change,
        cast(
            case
                when aged.day_age_hours >= 24 * 14 then 1
                else lateness_curve.share_arrived
            end as decimal(18, 6)
        ) as expected_share_complete,
        cast(aged.day_age_hours as decimal(18, 6)) as age_hours,
        {{ dayclose.as_of_at() }} as built_as_of

    from aged
    left join lateness_curve
        on cast(floor(aged.day_age_hours) as integer) = lateness_curve.age_hours

)

select * from final
