{#
    Replayed or retried units whose copy disagrees with the unit's first arrival (another
    production time, SKU or verdict: a PLC clock reset, a reused sequence number): the first
    arrival counts, the copy is listed here with both lines, and a gate warns. Rebuilt for the days a run rebuilds, in one statement:
    the pre-hook deletes those days and the select inserts them again, in one transaction.

    The first arrivals are found without reading the whole registry each night: its rows of
    those days, in one join with the copies; then, for the copies whose unit has no row there
    (a copy whose production time differs from its first arrival's; most nights none), its rows on
    other days.
#}
{#- Spark (no delete on parquet): the pre_hook drops the rebuilt days' partitions, insert_overwrite writes them -#}
{{
    config(
        materialized='incremental',
        incremental_strategy='insert_overwrite' if target.type == 'spark' else 'append',
        partition_by='production_date' if target.type == 'spark' else none,
        event_time='production_date',
        pre_hook="{{ dayclose.delete_rebuilt_days('units', 'production_date') }}",
        on_schema_change='fail',
        tags=['units'],
    )
}}

{%- set rebuilt = dayclose.rebuilt_range('units') -%}
{#- a plain dbt first build or full refresh reaches back as far as the daily marts do -#}
{%- set first_day = rebuilt[0] if is_incremental() else [rebuilt[0], dayclose.microbatch_begin()] | min -%}

with

copies as (

    -- the valid lines of the days the run rebuilds
    select * from {{ ref('int_unit_lines_validated') }}
    where
        is_valid
        and event_at >= cast('{{ first_day }}' as {{ dbt.type_timestamp() }})
        and event_at < cast('{{ rebuilt[1] }}' as {{ dbt.type_timestamp() }})

),

registered_in_days as (

    select * from {{ ref('int_units_deduplicated') }}
    where
        event_at >= cast('{{ first_day }}' as {{ dbt.type_timestamp() }})
        and event_at < cast('{{ rebuilt[1] }}' as {{ dbt.type_timestamp() }})

),

copies_against_days as (

    -- each copy against its unit's first arrival among those days; kept: the copies that
    -- disagree with it, and those whose unit has none there (looked up below)
    select
        copies.line_id,
        copies.plc_seq,
        copies.production_date,
        copies.event_at,
        copies.sku,
        copies.verdict,
        copies.batch_id,
        copies.file_name,
        copies.line_number,
        copies.batch_completed_at,
        first_arrivals.production_date as first_production_date,
        first_arrivals.event_at as first_event_at,
        first_arrivals.sku as first_sku,
        first_arrivals.verdict as first_verdict,
        first_arrivals.batch_id as first_batch_id,
        first_arrivals.file_name as first_file_name,
        first_arrivals.line_number as first_line_number

    from copies
    left join registered_in_days as first_arrivals
        on
            copies.line_id = first_arrivals.line_id
            and copies.plc_seq = first_arrivals.plc_seq
    where
        first_arrivals.batch_id is null
        or (
            not (
                copies.batch_id = first_arrivals.batch_id
                and copies.file_name = first_arrivals.file_name
                and copies.line_number = first_arrivals.line_number
            )
            and (
                copies.event_at <> first_arrivals.event_at
                or copies.sku <> first_arrivals.sku
                or copies.verdict <> first_arrivals.verdict
            )
        )

),

unmatched_keys as (

    -- the copies that found no first arrival among those days
    select distinct
        line_id,
        plc_seq

    from copies_against_days
    where first_batch_id is null

),

registered_elsewhere as (

    -- their first arrivals, on other days
    select registry.*

    from {{ ref('int_units_deduplicated') }} as registry
    inner join unmatched_keys as unmatched
        on
            registry.line_id = unmatched.line_id
            and registry.plc_seq = unmatched.plc_seq

),

copies_against_elsewhere as (

    select
        copies.line_id,
        copies.plc_seq,
        copies.production_date,
        copies.event_at,
        copies.sku,
        copies.verdict,
        copies.batch_id,
        copies.file_name,
        copies.line_number,
        copies.batch_completed_at,
        first_arrivals.production_date as first_production_date,
        first_arrivals.event_at as first_event_at,
        first_arrivals.sku as first_sku,
        first_arrivals.verdict as first_verdict,
        first_arrivals.batch_id as first_batch_id,
        first_arrivals.file_name as first_file_name,
        first_arrivals.line_number as first_line_number

    from copies
    inner join registered_elsewhere as first_arrivals
        on
            copies.line_id = first_arrivals.line_id
            and copies.plc_seq = first_arrivals.plc_seq
    where
        not (
            copies.batch_id = first_arrivals.batch_id
            and copies.file_name = first_arrivals.file_name
            and copies.line_number = first_arrivals.line_number
        )
        and (
            copies.event_at <> first_arrivals.event_at
            or copies.sku <> first_arrivals.sku
            or copies.verdict <> first_arrivals.verdict
        )

),

conflicts as (

    select * from copies_against_days
    where first_batch_id is not null
    union all
    select * from copies_against_elsewhere

),

final as (

    select
        conflicts.line_id,
        conflicts.plc_seq,
        conflicts.production_date,
        conflicts.first_production_date,
        conflicts.first_event_at,
        conflicts.event_at as copy_event_at,
        conflicts.first_sku,
        conflicts.sku as copy_sku,
        conflicts.first_verdict,
        conflicts.verdict as copy_verdict,
        conflicts.first_batch_id,
        conflicts.first_file_name,
        conflicts.first_line_number,
        conflicts.batch_id,
        conflicts.file_name,
        conflicts.line_number,
        conflicts.batch_completed_at,
        first_lines.raw_line as first_raw_line,
        copy_lines.raw_line as copy_raw_line

    from conflicts
    -- each conflict's two lines, looked up in one pass of the joins (Spark evaluates a CTE
    -- once per reference: `conflicts` is referenced here only)
    left join {{ ref('stg_landing__unit_lines') }} as first_lines
        on
            conflicts.first_batch_id = first_lines.batch_id
            and conflicts.first_file_name = first_lines.file_name
            and conflicts.first_line_number = first_lines.line_number
    left join {{ ref('stg_landing__unit_lines') }} as copy_lines
        on
            conflicts.batch_id = copy_lines.batch_id
            and conflicts.file_name = copy_lines.file_name
            and conflicts.line_number = copy_lines.line_number

)

select * from final
