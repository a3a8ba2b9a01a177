{#
    Resent sales whose copy disagrees with the sale's first arrival (another amount,
    shop or sale time: a till bug, a reused event_id): the first arrival counts, the
    copy is recorded here with both lines, and a gate warns. Built for the days a run
    rebuilds, in one statement.
#}
{{ config(**dayclose.rebuilt_days_incremental('sales', 'sale_date')) }}

{{ dayclose.conflicting_copies('sales', ref('int_sale_lines_validated'), ['sold_at', 'shop_id', 'amount']) }}
