{#
    Units per line and production day with the sensor picture: readings out of
    the SKU's spec and readings from a stuck sensor (the same value for at
    least stuck_sensor_run_units consecutive units). For operators' follow-up
    and for the gate that a producing line never reports zero units unnoticed.
#}
{{ config(**dayclose.daily_microbatch('units', 'production_date')) }}

with

line_sku_days as (

    -- dbt limits this to the batch's days through the event_time of the ref, and
    -- in_batch_days to those the run rebuilds (windows.sql)
    select * from {{ ref('int_line_sku_days_counted') }}
    where {{ dayclose.in_batch_days('units', 'production_date') }}

),

final as (

    select
        production_date,
        line_id,
        min(plant_id) as plant_id,
        cast(sum(units) as bigint) as units,
        cast(sum(good_units) as bigint) as good_units,
        cast(sum(units_out_of_spec) as bigint) as units_out_of_spec,
        cast(sum(units_with_stuck_sensor) as bigint) as units_with_stuck_sensor

    from line_sku_days
    group by production_date, line_id

)

select * from final
