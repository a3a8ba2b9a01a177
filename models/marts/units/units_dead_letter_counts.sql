{#- Dead letters per arrival batch and kind, for charts and the run summary (macros/landing_lines.sql). -#}
{{ config(tags=['units']) }}

{{ dayclose.dead_letter_counts('units', ref('int_unit_lines_validated')) }}
