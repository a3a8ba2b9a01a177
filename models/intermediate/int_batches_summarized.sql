{#
    Each loaded batch summarized once (macros/read_once.sql): its first event day
    and last arrival, from which the late-arrival models find the few batches that
    can hold events too late for the nightly window without reading the rest.
#}
{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key=['source_name', 'batch_id'],
        indexes=[{'columns': ['source_name', 'last_received_at']}],
        post_hook="{{ dayclose.index_if_missing(['source_name', 'batch_id']) }}",
        on_schema_change='fail',
        tags=['shared', 'lateness'],
    )
}}

{#- a first build summarizes every batch; later runs the batches not summarized yet -#}
{%- set to_summarize = dayclose.batches_to_summarize() -%}
{%- set is_new_batch = dayclose.in_batches(to_summarize) if is_incremental() else '1 = 1' -%}

with

batch_loads as (

    select * from {{ ref('stg_landing__batch_loads') }}
    where
        is_loaded
        and batch_completed_at <= {{ dayclose.as_of_at() }}
        and {{ is_new_batch }}

),

arrivals as (

    {%- set sources = dayclose.landing_sources() if not is_incremental() else to_summarize.keys() | list %}
    {%- for source_name in sources %}
    {{ 'union all' if not loop.first }}
    select * from ({{ dayclose.source_arrivals(source_name) }}) as {{ source_name }}_arrivals
    {%- if is_incremental() %}
    where {{ dayclose.in_batches({source_name: to_summarize[source_name]}) }}
    {%- endif %}
    {%- else %}
    {{ dayclose.no_arrivals() }}
    {%- endfor %}

),

arrivals_per_batch as (

    select
        source_name,
        batch_id,
        min(event_date) as first_event_date,
        max(received_at) as last_received_at,
        count(*) as events

    from arrivals
    group by source_name, batch_id

),

final as (

    select
        batch_loads.source_name,
        batch_loads.batch_id,
        batch_loads.manifest_sha256,
        batch_loads.batch_completed_at,
        arrivals_per_batch.first_event_date,
        arrivals_per_batch.last_received_at,
        cast(coalesce(arrivals_per_batch.events, 0) as bigint) as events

    from batch_loads
    left join arrivals_per_batch
        on
            batch_loads.source_name = arrivals_per_batch.source_name
            and batch_loads.batch_id = arrivals_per_batch.batch_id

)

select * from final
