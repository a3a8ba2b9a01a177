{#
    Replayed or retried units whose copy disagrees with the unit's first arrival (another
    production time, SKU or verdict: a PLC clock reset, a reused sequence number): the
    first arrival counts, the copy is recorded here with both lines, and a gate warns.
    Built for the days a run rebuilds, in one statement.
#}
{{ config(**dayclose.rebuilt_days_incremental('units', 'production_date')) }}

{{ dayclose.conflicting_copies('units', ref('int_unit_lines_validated'), ['event_at', 'sku', 'verdict']) }}
