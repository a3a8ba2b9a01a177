{#
    Resent sales whose copy disagrees with the sale's first arrival (another sale time, shop or
    amount: a till bug, a reused event_id): the first arrival counts, the copy is listed here
    with both lines, and a gate warns. Rebuilt for the days a run rebuilds, in one statement:
    the pre-hook deletes those days and the select inserts them again, in one transaction.

    The first arrivals are found without reading the whole registry each night: its rows of
    those days, in one join with the copies; then, for the copies whose sale has no row there
    (a copy whose sale time differs from its first arrival's; most nights none), its rows on
    other days.
#}
{#- Spark (no delete on parquet): the pre_hook drops the rebuilt days' partitions, insert_overwrite writes them -#}
{{
    config(
        materialized='incremental',
        incremental_strategy='insert_overwrite' if target.type == 'spark' else 'append',
        partition_by='sale_date' if target.type == 'spark' else none,
        event_time='sale_date',
        pre_hook="{{ dayclose.delete_rebuilt_days('sales', 'sale_date') }}",
        on_schema_change='fail',
        tags=['sales'],
    )
}}

{%- set rebuilt = dayclose.rebuilt_range('sales') -%}
{#- a plain dbt first build or full refresh reaches back as far as the daily marts do -#}
{%- set first_day = rebuilt[0] if is_incremental() else [rebuilt[0], dayclose.microbatch_begin()] | min -%}

with

copies as (

    -- the valid lines of the days the run rebuilds
    select * from {{ ref('int_sale_lines_validated') }}
    where
        is_valid
        and sold_at >= cast('{{ first_day }}' as {{ dbt.type_timestamp() }})
        and sold_at < cast('{{ rebuilt[1] }}' as {{ dbt.type_timestamp() }})

),

registered_in_days as (

    select * from {{ ref('int_sales_deduplicated') }}
    where
        sold_at >= cast('{{ first_day }}' as {{ dbt.type_timestamp() }})
        and sold_at < cast('{{ rebuilt[1] }}' as {{ dbt.type_timestamp() }})

),

copies_against_days as (

    -- each copy against its sale's first arrival among those days; kept: the copies that
    -- disagree with it, and those whose sale has none there (looked up below)
    select
        copies.event_id,
        copies.sale_date,
        copies.sold_at,
        copies.shop_id,
        copies.amount,
        copies.batch_id,
        copies.file_name,
        copies.line_number,
        copies.batch_completed_at,
        first_arrivals.sale_date as first_sale_date,
        first_arrivals.sold_at as first_sold_at,
        first_arrivals.shop_id as first_shop_id,
        first_arrivals.amount as first_amount,
        first_arrivals.batch_id as first_batch_id,
        first_arrivals.file_name as first_file_name,
        first_arrivals.line_number as first_line_number

    from copies
    left join registered_in_days as first_arrivals
        on copies.event_id = first_arrivals.event_id
    where
        first_arrivals.batch_id is null
        or (
            not (
                copies.batch_id = first_arrivals.batch_id
                and copies.file_name = first_arrivals.file_name
                and copies.line_number = first_arrivals.line_number
            )
            and (
                copies.sold_at <> first_arrivals.sold_at
                or copies.shop_id <> first_arrivals.shop_id
                or copies.amount <> first_arrivals.amount
            )
        )

),

unmatched_keys as (

    -- the copies that found no first arrival among those days
    select distinct event_id

    from copies_against_days
    where first_batch_id is null

),

registered_elsewhere as (

    -- their first arrivals, on other days
    select registry.*

    from {{ ref('int_sales_deduplicated') }} as registry
    inner join unmatched_keys as unmatched
        on
            registry.event_id = unmatched.event_id

),

copies_against_elsewhere as (

    select
        copies.event_id,
        copies.sale_date,
        copies.sold_at,
        copies.shop_id,
        copies.amount,
        copies.batch_id,
        copies.file_name,
        copies.line_number,
        copies.batch_completed_at,
        first_arrivals.sale_date as first_sale_date,
        first_arrivals.sold_at as first_sold_at,
        first_arrivals.shop_id as first_shop_id,
        first_arrivals.amount as first_amount,
        first_arrivals.batch_id as first_batch_id,
        first_arrivals.file_name as first_file_name,
        first_arrivals.line_number as first_line_number

    from copies
    inner join registered_elsewhere as first_arrivals
        on copies.event_id = first_arrivals.event_id
    where
        not (
            copies.batch_id = first_arrivals.batch_id
            and copies.file_name = first_arrivals.file_name
            and copies.line_number = first_arrivals.line_number
        )
        and (
            copies.sold_at <> first_arrivals.sold_at
            or copies.shop_id <> first_arrivals.shop_id
            or copies.amount <> first_arrivals.amount
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
        conflicts.event_id,
        conflicts.sale_date,
        conflicts.first_sale_date,
        conflicts.first_sold_at,
        conflicts.sold_at as copy_sold_at,
        conflicts.first_shop_id,
        conflicts.shop_id as copy_shop_id,
        conflicts.first_amount,
        conflicts.amount as copy_amount,
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
    left join {{ ref('stg_landing__sale_lines') }} as first_lines
        on
            conflicts.first_batch_id = first_lines.batch_id
            and conflicts.first_file_name = first_lines.file_name
            and conflicts.first_line_number = first_lines.line_number
    left join {{ ref('stg_landing__sale_lines') }} as copy_lines
        on
            conflicts.batch_id = copy_lines.batch_id
            and conflicts.file_name = copy_lines.file_name
            and conflicts.line_number = copy_lines.line_number

)

select * from final
