{#
    Daily sales per shop, grouped by when the sale happened (sold_at), built by
    arrival: each nightly run rebuilds the last sales_window_days days, and each
    day of the window is overwritten whole (macros/microbatch_overwrite.sql).
    A sale counts once, at its first arrival (int_sales_deduplicated).
#}
{{ config(**dayclose.daily_microbatch('sales', 'sale_date')) }}

with

known_sales as (

    -- dbt limits this to the batch's days through the event_time of the ref; a run as of
    -- T counts what had arrived, in complete batches, by T
    {{ dayclose.known_as_of(ref('int_sales_deduplicated')) }}

),

sales as (

    -- the batch's days the run rebuilds (windows.sql)
    select * from known_sales
    where {{ dayclose.in_batch_days('sales', 'sold_at') }}

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
