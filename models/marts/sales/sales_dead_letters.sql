{#
    Every sales line that is not a valid sale, with its raw text as received (and its exact bytes in
    hex when they are not text), its batch, file, line number, reason and kind, and what could
    be read of it. A view: always the current state of the landing, at no cost to the nightly run.
#}
{{ config(materialized='view', tags=['sales']) }}

with

invalid_lines as (

    select * from {{ ref('int_sale_lines_validated') }}
    where not is_valid

),

sale_lines as (

    select * from {{ ref('stg_landing__sale_lines') }}

),

final as (

    select
        invalid_lines.batch_id,
        invalid_lines.batch_completed_at,
        invalid_lines.file_name,
        invalid_lines.line_number,
        sale_lines.raw_line,
        sale_lines.raw_line_hex,
        invalid_lines.dead_letter_kind,
        invalid_lines.dead_letter_reason,
        invalid_lines.event_id,
        invalid_lines.shop_id,
        invalid_lines.sale_date,
        invalid_lines.received_at

    from invalid_lines
    inner join sale_lines
        on
            invalid_lines.batch_id = sale_lines.batch_id
            and invalid_lines.file_name = sale_lines.file_name
            and invalid_lines.line_number = sale_lines.line_number

)

select * from final
