{#- The sales landing lines as received, one row per line, with the batch's arrival hour. -#}
{{ config(tags=['sales']) }}

with

source as (

    select * from {{ source('landing', 'sale_lines') }}

),

final as (

    select
        batch_id,
        cast(
            {{ dbt.concat([dbt.replace('batch_id', "'T'", "' '"), "':00:00'"]) }} as {{ dbt.type_timestamp() }}
        ) as batch_arrived_at,
        file_name,
        line_number,
        raw_line,
        raw_line_hex,
        byte_error

    from source

)

select * from final
