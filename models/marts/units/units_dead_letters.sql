{#
    Every units line that is not a valid unit, with its raw text as received (and its exact bytes in
    hex when they are not text), its batch, file, line number, reason and kind, and what could
    be read of it. A view: always the current state of the landing, at no cost to the nightly run.
#}
{{ config(materialized='view', tags=['units']) }}

with

invalid_lines as (

    select * from {{ ref('int_unit_lines_validated') }}
    where not is_valid

),

unit_lines as (

    select * from {{ ref('stg_landing__unit_lines') }}

),

final as (

    select
        invalid_lines.batch_id,
        invalid_lines.batch_completed_at,
        invalid_lines.file_name,
        invalid_lines.line_number,
        unit_lines.raw_line,
        unit_lines.raw_line_hex,
        invalid_lines.dead_letter_kind,
        invalid_lines.dead_letter_reason,
        invalid_lines.line_id,
        invalid_lines.plant_id,
        invalid_lines.plc_seq,
        invalid_lines.sku,
        invalid_lines.production_date,
        invalid_lines.received_at

    from invalid_lines
    inner join unit_lines
        on
            invalid_lines.batch_id = unit_lines.batch_id
            and invalid_lines.file_name = unit_lines.file_name
            and invalid_lines.line_number = unit_lines.line_number

)

select * from final
