{#-
    Each valid sale once, at its first arrival over the whole history: a resent sale
    (same event_id), on whatever day and in whatever batch, is a copy and counts never
    again (macros/landing_lines.sql). Read incrementally: the nightly cost follows the
    batches loaded, not the history.
-#}
{{ dayclose.first_arrivals('sales', ref('int_sale_lines_validated'), ['shop_id', 'amount']) }}
