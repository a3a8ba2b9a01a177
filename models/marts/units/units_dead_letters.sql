{#
    Every units line that is not a valid unit, with its raw text, batch, file, line
    number, reason and kind. A view: always the current state of the landing.
#}
{{ config(materialized='view', tags=['units']) }}

{{
    dayclose.dead_letters('units', ref('int_unit_lines_validated'), [
        'line_id', 'plant_id', 'plc_seq', 'sku', 'production_date', 'received_at',
    ])
}}
