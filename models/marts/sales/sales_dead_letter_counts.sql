{#- Dead letters per arrival batch and kind, for charts and the run summary (macros/landing_lines.sql). -#}
{{ config(tags=['sales']) }}

{{ dayclose.dead_letter_counts('sales', ref('int_sale_lines_validated')) }}
