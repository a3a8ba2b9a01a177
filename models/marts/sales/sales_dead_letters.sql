{#
    Every sales line that is not a valid sale, with its raw text, batch, file, line
    number, reason and kind. A view: always the current state of the landing, and it
    costs the nightly run nothing.
#}
{{ config(materialized='view', tags=['sales']) }}

{{
    dayclose.dead_letters('sales', ref('int_sale_lines_validated'), [
        'event_id', 'shop_id', 'sale_date', 'received_at',
    ])
}}
