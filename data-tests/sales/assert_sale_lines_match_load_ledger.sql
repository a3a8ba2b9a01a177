{#
    Nothing lost in landing: every loaded sales batch is in the raw table exactly once.
#}
{{ config(tags=['gate', 'sales']) }}

{{ dayclose.ledger_mismatches('sales', source('landing', 'sale_lines')) }}
