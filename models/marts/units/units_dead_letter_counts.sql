{#- Dead letters per arrival batch and kind, for charts and the run summary (macros/landing_lines.sql). -#}
{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='batch_id',
        on_schema_change='fail',
        tags=['units'],
    )
}}

{{ dayclose.dead_letter_counts('units', ref('int_unit_lines_validated')) }}
