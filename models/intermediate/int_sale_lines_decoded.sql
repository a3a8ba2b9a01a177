{#-
    Every sales line decoded once, by the landing contract (macros/contract.sql), in
    the nightly run after its batch was loaded; a replaced batch is decoded again whole.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='batch_id',
        indexes=[{'columns': ['batch_id']}, {'columns': ['sold_at']}],
        on_schema_change='fail',
        tags=['sales'],
    )
}}

{{ dayclose.decoded_lines('sales', ref('stg_landing__sale_lines')) }}
