{#
    Every valid event of every landing source with its batch, its event time and its
    arrival time: the input of the lateness models. A new source adds one select here.
#}
{{ config(tags=['sales', 'units', 'lateness']) }}

with

sales as (

    select
        'sales' as source_name,
        batch_id,
        event_id as event_key,
        sold_at as event_at,
        received_at,
        sale_date as event_date

    from {{ ref('int_sale_lines_validated') }}
    where is_valid

),

units as (

    select
        'units' as source_name,
        batch_id,
        {{ dbt.concat(["line_id", "'/'", dbt.cast("plc_seq", dbt.type_string())]) }} as event_key,
        event_at,
        received_at,
        production_date as event_date

    from {{ ref('int_unit_lines_validated') }}
    where is_valid

),

final as (

    select * from sales
    union all
    select * from units

)

select * from final
