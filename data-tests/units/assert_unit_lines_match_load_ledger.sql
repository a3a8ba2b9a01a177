{#
    Nothing lost in landing: every loaded units batch is in the raw table exactly once.
#}
{{ config(tags=['gate', 'units']) }}

{{ dayclose.ledger_mismatches('units', source('landing', 'unit_lines')) }}
