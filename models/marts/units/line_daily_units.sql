{#
    Units per line and production day with the sensor picture: readings out of
    the SKU's spec and readings from a stuck sensor (the same value for at
    least stuck_sensor_run_units consecutive units). For operators' follow-up
    and for the gate that a producing line never reports zero units unnoticed.
#}
{{
    config(
        materialized='incremental',
        incremental_strategy='microbatch',
        event_time='production_date',
        batch_size='day',
        begin='2020-01-01',
        lookback=dayclose.window_days('units'),
        tags=['units'],
    )
}}

with

unit_lines as (

    select * from {{ ref('int_unit_lines_validated') }}
    where is_valid

),

units as (

    {{ dayclose.first_copies('unit_lines', ['line_id', 'plc_seq']) }}

),

changes as (

    select
        line_id,
        plant_id,
        production_date,
        plc_seq,
        verdict,
        has_sensor_out_of_spec,
        case
            when fill_level_ml = lag(fill_level_ml) over (partition by line_id order by plc_seq) then 0
            else 1
        end as fill_level_changed,
        case
            when capper_torque_nm = lag(capper_torque_nm) over (partition by line_id order by plc_seq) then 0
            else 1
        end as capper_torque_changed,
        case
            when temperature_c = lag(temperature_c) over (partition by line_id order by plc_seq) then 0
            else 1
        end as temperature_changed

    from units

),

runs as (

    select
        *,
        sum(fill_level_changed) over (
            partition by line_id order by plc_seq rows unbounded preceding
        ) as fill_level_run,
        sum(capper_torque_changed) over (
            partition by line_id order by plc_seq rows unbounded preceding
        ) as capper_torque_run,
        sum(temperature_changed) over (
            partition by line_id order by plc_seq rows unbounded preceding
        ) as temperature_run

    from changes

),

run_lengths as (

    select
        *,
        count(*) over (partition by line_id, fill_level_run) as fill_level_run_length,
        count(*) over (partition by line_id, capper_torque_run) as capper_torque_run_length,
        count(*) over (partition by line_id, temperature_run) as temperature_run_length

    from runs

),

final as (

    select
        production_date,
        line_id,
        min(plant_id) as plant_id,
        cast(count(*) as bigint) as units,
        cast(sum(case when verdict = 'good' then 1 else 0 end) as bigint) as good_units,
        cast(sum(case when has_sensor_out_of_spec then 1 else 0 end) as bigint) as units_out_of_spec,
        cast(sum(
            case
                when
                    fill_level_run_length >= {{ var('stuck_sensor_run_units') }}
                    or capper_torque_run_length >= {{ var('stuck_sensor_run_units') }}
                    or temperature_run_length >= {{ var('stuck_sensor_run_units') }}
                    then 1
                else 0
            end
        ) as bigint) as units_with_stuck_sensor

    from run_lengths
    group by production_date, line_id

)

select * from final
