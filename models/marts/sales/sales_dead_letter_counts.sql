{#- Dead letters per arrival batch and kind, for charts and the run summary (macros/landing_lines.sql). -#}
{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='batch_id',
        on_schema_change='fail',
        tags=['sales'],
    )
}}

{{ dayclose.dead_letter_counts('sales', ref('int_sale_lines_validated')) }}
