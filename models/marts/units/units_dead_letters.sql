{#
    Every units line that is not a valid unit, with its raw text, batch, file,
    line number and reason. A view: always the current state of landing.
#}
{{ config(materialized='view', tags=['units']) }}

with

unit_lines as (

    select * from {{ ref('int_unit_lines_validated') }}

),

final as (

    select
        batch_id,
        batch_completed_at,
        file_name,
        line_number,
        raw_line,
        dead_letter_reason,
        line_id,
        plant_id,
        plc_seq,
        sku,
        production_date,
        received_at

    from unit_lines
    where not is_valid

)

select * from final
