{#
    Every sales line that is not a valid sale, with its raw text, batch, file,
    line number and reason. A view, so it is always the current state of the
    landing tables and costs the nightly run nothing.
#}
{{ config(materialized='view', tags=['sales']) }}

with

sale_lines as (

    select * from {{ ref('int_sale_lines_validated') }}

),

final as (

    select
        batch_id,
        file_name,
        line_number,
        raw_line,
        dead_letter_reason,
        event_id,
        shop_id,
        sale_date,
        received_at

    from sale_lines
    where not is_valid

)

select * from final
