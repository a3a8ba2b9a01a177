{#-
    Each valid sale once, at its first arrival over the whole history: a resent sale
    (same event_id), on whatever day and in whatever batch, is a copy and counts never
    again (macros/landing_lines.sql). Read incrementally: the nightly cost follows the
    batches loaded, not the history.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='event_id',
        event_time='sold_at',
        indexes=[{'columns': ['event_id'], 'unique': True}, {'columns': ['sold_at']}, {'columns': ['batch_id']}],
        post_hook="{{ dayclose.vanished_first_arrivals() }}",
        on_schema_change='fail',
        tags=['sales'],
    )
}}

{{ dayclose.first_arrivals('sales', ref('int_sale_lines_validated'), ['shop_id', 'amount']) }}
