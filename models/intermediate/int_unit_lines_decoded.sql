{#-
    Every units line decoded once, by the landing contract (macros/contract.sql), in
    the nightly run after its batch was loaded; a replaced batch is decoded again whole.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='batch_id',
        indexes=[{'columns': ['batch_id']}, {'columns': ['event_at']}],
        on_schema_change='fail',
        tags=['units'],
    )
}}

{{ dayclose.decoded_lines('units', ref('stg_landing__unit_lines')) }}
