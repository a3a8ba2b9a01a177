{#-
    Each valid unit once, at its first arrival over the whole history: a replayed or retried
    unit (same line_id and plc_seq), on whatever day and in whatever batch, is a copy and counts
    never again (docs/decisions/0002-first-arrival-registry.md).

    Incremental: a night reads the valid lines of the batches loaded since the last build and
    the registered first arrivals of their units, so its cost follows the new data, not the
    history. It returns only what changes (strategy first_arrivals,
    macros/materializations/first_arrivals.sql): new units, and revised ones (is_revised: a
    batch loaded late held an earlier copy, or the registered first arrival's batch came again
    with a new manifest), which replace their registered row. A unit whose every copy went with
    such a batch returns in batch '(vanished)', which replaces its row and is then deleted.
-#}

-- depends_on: {{ ref('stg_landing__batch_loads') }}

with

unit_lines as (

    select * from {{ ref('int_unit_lines_validated') }}
    where is_valid

),

{%- if is_incremental() %}

batch_loads as (

    -- the batches loaded (or loaded again) since the last build
    select * from {{ ref('stg_landing__batch_loads') }}
    where
        source_name = 'units'
        and is_loaded
        and loaded_at > (
            select coalesce(max(batch_loaded_at), cast('1900-01-01' as {{ dbt.type_timestamp() }}))
            from {{ this }}
        )

),
{%- endif %}

new_lines as (

    select
        line_id,
        plc_seq,
        batch_id,
        batch_loaded_at,
        batch_completed_at,
        file_name,
        line_number,
        received_at,
        event_at,
        production_date,
        plant_id,
        sku,
        verdict,
        fill_level_ml,
        capper_torque_nm,
        temperature_c,
        has_sensor_out_of_spec,
        {{ dayclose.event_hash(['line_id', 'plc_seq']) }} as event_hash,
        0 as is_registered,
        0 as replaces_registered

    from unit_lines
    {% if is_incremental() -%}
    where
        batch_id in (select batch_id from batch_loads)
        and batch_id >= (select min(batch_id) from batch_loads)
    {%- endif %}

),
{%- if is_incremental() %}

replaced_units as (

    -- the registered units whose first arrival is in a batch loaded again (a new manifest)
    select
        line_id,
        plc_seq,
        event_hash

    from {{ this }}
    where
        batch_id in (select batch_id from batch_loads)
        and batch_id >= (select min(batch_id) from batch_loads)

),

copies_of_replaced as (

    -- every valid copy left of those units, which replaces their registered row, and a
    -- placeholder ranked after any copy: a unit with no copy left keeps only the placeholder
    select
        unit_lines.line_id,
        unit_lines.plc_seq,
        unit_lines.batch_id,
        unit_lines.batch_loaded_at,
        unit_lines.batch_completed_at,
        unit_lines.file_name,
        unit_lines.line_number,
        unit_lines.received_at,
        unit_lines.event_at,
        unit_lines.production_date,
        unit_lines.plant_id,
        unit_lines.sku,
        unit_lines.verdict,
        unit_lines.fill_level_ml,
        unit_lines.capper_torque_nm,
        unit_lines.temperature_c,
        unit_lines.has_sensor_out_of_spec,
        replaced_units.event_hash,
        0 as is_registered,
        1 as replaces_registered

    from unit_lines
    inner join replaced_units
        on
            unit_lines.line_id = replaced_units.line_id
            and unit_lines.plc_seq = replaced_units.plc_seq

    union all

    select
        line_id,
        plc_seq,
        '(vanished)' as batch_id,
        cast(null as {{ dbt.type_timestamp() }}) as batch_loaded_at,
        cast(null as {{ dbt.type_timestamp() }}) as batch_completed_at,
        cast(null as {{ dbt.type_string() }}) as file_name,
        cast(null as {{ dbt.type_bigint() }}) as line_number,
        cast(null as {{ dbt.type_timestamp() }}) as received_at,
        cast(null as {{ dbt.type_timestamp() }}) as event_at,
        cast(null as date) as production_date,
        cast(null as {{ dbt.type_string() }}) as plant_id,
        cast(null as {{ dbt.type_string() }}) as sku,
        cast(null as {{ dbt.type_string() }}) as verdict,
        cast(null as {{ dayclose.type_double() }}) as fill_level_ml,
        cast(null as {{ dayclose.type_double() }}) as capper_torque_nm,
        cast(null as {{ dayclose.type_double() }}) as temperature_c,
        cast(null as {{ dbt.type_boolean() }}) as has_sensor_out_of_spec,
        event_hash,
        0 as is_registered,
        1 as replaces_registered

    from replaced_units

),

registered as (

    -- the registered first arrivals of the new lines' units (but the replaced ones): their
    -- place in the arrival order, as a registered one that stays first is not returned
    select
        registry.line_id,
        registry.plc_seq,
        registry.batch_id,
        cast(null as {{ dbt.type_timestamp() }}) as batch_loaded_at,
        cast(null as {{ dbt.type_timestamp() }}) as batch_completed_at,
        registry.file_name,
        registry.line_number,
        registry.received_at,
        cast(null as {{ dbt.type_timestamp() }}) as event_at,
        cast(null as date) as production_date,
        cast(null as {{ dbt.type_string() }}) as plant_id,
        cast(null as {{ dbt.type_string() }}) as sku,
        cast(null as {{ dbt.type_string() }}) as verdict,
        cast(null as {{ dayclose.type_double() }}) as fill_level_ml,
        cast(null as {{ dayclose.type_double() }}) as capper_torque_nm,
        cast(null as {{ dayclose.type_double() }}) as temperature_c,
        cast(null as {{ dbt.type_boolean() }}) as has_sensor_out_of_spec,
        registry.event_hash,
        1 as is_registered,
        1 as replaces_registered

    from {{ this }} as registry
    where
        {{ dayclose.event_among('registry', ['line_id', 'plc_seq'], 'new_lines') }}
        and registry.batch_id not in (select batch_id from batch_loads)

),
{%- endif %}

candidates as (

    select * from new_lines
    {%- if is_incremental() %}
    union all
    select * from copies_of_replaced
    union all
    select * from registered
    {%- endif %}

),

ranked as (

    -- each candidate's place in its unit's arrival order (one window: a CTE referenced more
    -- than once is computed once per reference on Spark)
    select
        *,
        row_number() over (
            partition by line_id, plc_seq
            order by
                case when batch_id = '(vanished)' then 1 else 0 end,
                batch_id,
                received_at,
                file_name,
                line_number
        ) as arrival_rank,
        max(replaces_registered) over (partition by line_id, plc_seq) as has_registered_row

    from candidates

),

final as (

    -- the first copy of each unit, but a registered one that stays first (nothing changes)
    select
        line_id,
        plc_seq,
        batch_id,
        batch_loaded_at,
        batch_completed_at,
        file_name,
        line_number,
        received_at,
        event_at,
        production_date,
        plant_id,
        sku,
        verdict,
        fill_level_ml,
        capper_torque_nm,
        temperature_c,
        has_sensor_out_of_spec,
        event_hash,
        has_registered_row = 1 as is_revised

    from ranked
    where arrival_rank = 1 and is_registered = 0

)

-- in the order of the units' days, so that the registry grows in that order and a look-up of
-- some days' units reads only those days' storage (row groups on DuckDB)
select * from final
order by production_date
