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
        lookback=dayclose.window_days('sales'),
        tags=['sales'],
    )
}}

with

sale_lines as (

    -- dbt limits this to the batch's day through the event_time of the ref
    select * from {{ ref('int_sale_lines_validated') }}
    where is_valid

),

sales as (

    -- a resent sale (same event_id) counts once, as its first arrival
    {{ dayclose.first_copies('sale_lines', ['event_id']) }}

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
