{#
    Every units line known as of the run, with its validation verdict and its
    sensor flags. A sensor reading outside the SKU's spec is flagged here and
    nothing more: the count follows the PLC's verdict, never the sensors.
#}
{{
    config(
        event_time='event_at',
        tags=['units'],
    )
}}

with

unit_lines as (

    select * from {{ ref('stg_landing__unit_lines') }}
    where batch_completed_at <= {{ dayclose.as_of_at() }}

),

lines as (

    select * from {{ ref('lines') }}

),

skus as (

    select * from {{ ref('skus') }}

),

sensor_specs as (

    select * from {{ ref('sensor_specs') }}

),

checked as (

    select
        unit_lines.batch_id,
        unit_lines.batch_completed_at,
        unit_lines.file_name,
        unit_lines.line_number,
        unit_lines.raw_line,
        unit_lines.line_id,
        lines.plant_id,
        unit_lines.plc_seq,
        unit_lines.sku,
        unit_lines.event_at,
        unit_lines.received_at,
        unit_lines.verdict,
        unit_lines.fill_level_ml,
        unit_lines.capper_torque_nm,
        unit_lines.temperature_c,
        unit_lines.production_date,
        case
            when unit_lines.decode_error is not null
                then unit_lines.decode_error
            when lines.line_id is null
                then {{ dbt.concat(["'unknown line_id '", "unit_lines.line_id"]) }}
            when skus.sku is null
                then {{ dbt.concat(["'unknown sku '", "unit_lines.sku"]) }}
            when unit_lines.verdict not in ('good', 'reject')
                then {{ dbt.concat(["'verdict not in (good, reject): '", "unit_lines.verdict"]) }}
            when unit_lines.event_at < lines.commissioned_at
                then 'event_at before the line was commissioned'
            when unit_lines.event_at > unit_lines.received_at
                then 'event_at after received_at'
        end as dead_letter_reason,
        unit_lines.fill_level_ml not between sensor_specs.fill_level_min_ml
        and sensor_specs.fill_level_max_ml as is_fill_level_out_of_spec,
        unit_lines.capper_torque_nm not between sensor_specs.capper_torque_min_nm
        and sensor_specs.capper_torque_max_nm as is_capper_torque_out_of_spec,
        unit_lines.temperature_c not between sensor_specs.temperature_min_c
        and sensor_specs.temperature_max_c as is_temperature_out_of_spec

    from unit_lines
    left join lines
        on unit_lines.line_id = lines.line_id
    left join skus
        on unit_lines.sku = skus.sku
    left join sensor_specs
        on unit_lines.sku = sensor_specs.sku

),

final as (

    select
        *,
        dead_letter_reason is null as is_valid,
        coalesce(
            is_fill_level_out_of_spec or is_capper_torque_out_of_spec or is_temperature_out_of_spec,
            false
        ) as has_sensor_out_of_spec

    from checked

)

select * from final
