{#
    Daily sales per shop, grouped by when the sale happened (sold_at), built by
    arrival: each nightly run rebuilds the last sales_window_days days, and each
    day of the window is overwritten whole (macros/microbatch_overwrite.sql).
#}
{{
    config(
        materialized='incremental',
        incremental_strategy='microbatch',
        event_time='sale_date',
        batch_size='day',
        begin='2020-01-01',
        lookback=var('sales_window_days'),
        tags=['sales'],
    )
}}

with

sale_lines as (

    -- dbt limits this to the batch's day through the event_time of the ref
    select * from {{ ref('int_sale_lines_validated') }}
    where is_valid

),

copies_ranked as (

    select
        event_id,
        shop_id,
        sale_date,
        amount,
        row_number() over (
            partition by event_id
            order by received_at, batch_id, file_name, line_number
        ) as copy_number

    from sale_lines

),

sales as (

    -- a resent sale (same event_id) counts once, as its first arrival
    select * from copies_ranked
    where copy_number = 1

),

shop_days as (

    select
        sale_date,
        shop_id,
        cast(sum(amount) as decimal(18, 2)) as sales_amount,
        cast(count(*) as bigint) as sales_count

    from sales
    group by sale_date, shop_id

),

final as (

    {{ dayclose.select_with_day_status('sales', 'shop_days', 'sale_date') }}

)

select * from final
