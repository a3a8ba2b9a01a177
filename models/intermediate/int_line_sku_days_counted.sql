{#
    Each production day's units counted once per line and SKU, in one pass over the day's
    first arrivals: the counts finance closes on and the sensor picture operators follow
    up (readings out of the SKU's spec; readings from a stuck sensor, the same value for
    at least stuck_sensor_run_units consecutive units of a line). daily_good_units and
    line_daily_units add these up.
#}
{#- day batches: a run of equal readings is followed within its batch (one day) -#}
{#- Spark: dbt-spark's microbatch overwrites the batch's day partitions (dynamic partition overwrite);
    the pre_hook drops the run's rebuilt days first: a day the select no longer returns keeps none -#}
{{
    config(
        materialized='incremental',
        incremental_strategy='microbatch',
        event_time='production_date',
        partition_by='production_date' if target.type == 'spark' else none,
        pre_hook="{{ dayclose.delete_rebuilt_days('units', 'production_date') if target.type == 'spark' }}",
        batch_size='day',
        begin=dayclose.microbatch_begin(),
        lookback=dayclose.window_days('units'),
        on_schema_change='fail',
        tags=['units'],
    )
}}

{%- set sensors = ['fill_level_ml', 'capper_torque_nm', 'temperature_c'] -%}

with

units as (

    -- dbt limits this to the batch's day through the event_time of the ref;
    -- a run as of T counts what had arrived, in complete batches, by T
    select * from {{ ref('int_units_deduplicated') }}
    where batch_completed_at <= {{ dayclose.as_of_at() }}

),

sensor_changes as (

    select
        {%- for sensor in sensors %}
            case
                when {{ sensor }} = lag({{ sensor }}) over (partition by line_id order by plc_seq) then 0
                else 1
            end as {{ sensor }}_changed,
        {%- endfor %}
        line_id,
        plc_seq

    from units

),

sensor_runs as (

    -- consecutive units with the same reading share a run number, per line and sensor
    select
        {%- for sensor in sensors %}
            sum({{ sensor }}_changed) over (
                partition by line_id order by plc_seq rows between unbounded preceding and current row
            ) as {{ sensor }}_run,
        {%- endfor %}
        line_id,
        plc_seq

    from sensor_changes

),

fill_level_runs as (

    select
        line_id,
        min(plc_seq) as first_plc_seq,
        max(plc_seq) as last_plc_seq

    from sensor_runs
    group by line_id, fill_level_ml_run
    having count(*) >= {{ var('stuck_sensor_run_units') }}

),

capper_torque_runs as (

    select
        line_id,
        min(plc_seq) as first_plc_seq,
        max(plc_seq) as last_plc_seq

    from sensor_runs
    group by line_id, capper_torque_nm_run
    having count(*) >= {{ var('stuck_sensor_run_units') }}

),

temperature_runs as (

    select
        line_id,
        min(plc_seq) as first_plc_seq,
        max(plc_seq) as last_plc_seq

    from sensor_runs
    group by line_id, temperature_c_run
    having count(*) >= {{ var('stuck_sensor_run_units') }}

),

stuck_runs as (

    select * from fill_level_runs
    union all
    select * from capper_torque_runs
    union all
    select * from temperature_runs

),

stuck_units as (

    select distinct
        units.line_id,
        units.plc_seq

    from units
    inner join stuck_runs
        on
            units.line_id = stuck_runs.line_id
            and units.plc_seq >= stuck_runs.first_plc_seq
            and units.plc_seq <= stuck_runs.last_plc_seq

),

final as (

    select
        units.production_date,
        units.line_id,
        units.sku,
        min(units.plant_id) as plant_id,
        cast(count(*) as bigint) as units,
        cast(sum(case when units.verdict = 'good' then 1 else 0 end) as bigint) as good_units,
        cast(sum(case when units.verdict = 'reject' then 1 else 0 end) as bigint) as rejected_units,
        cast(
            sum(case when units.verdict = 'good' and units.has_sensor_out_of_spec then 1 else 0 end) as bigint
        ) as good_units_with_sensor_flags,
        cast(sum(case when units.has_sensor_out_of_spec then 1 else 0 end) as bigint) as units_out_of_spec,
        cast(count(stuck_units.plc_seq) as bigint) as units_with_stuck_sensor

    from units
    left join stuck_units
        on
            units.line_id = stuck_units.line_id
            and units.plc_seq = stuck_units.plc_seq
    group by units.production_date, units.line_id, units.sku

)

select * from final
