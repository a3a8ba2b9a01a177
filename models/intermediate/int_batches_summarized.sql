{#
    Each loaded batch summarized once, from the first arrivals it brought: its earliest event day
    and its latest arrival. The late-arrival models find from these the few batches that can
    hold an event too late for the nightly window, without reading the rest. A batch is
    summarized on the first run that sees it complete once its source's registry holds it, and
    again, in place, when it is loaded again with a new manifest.
#}
{%- set sales_built = load_relation(ref('int_sales_deduplicated')) is not none -%}
{%- set units_built = load_relation(ref('int_units_deduplicated')) is not none -%}

with

batch_loads as (

    select * from {{ ref('stg_landing__batch_loads') }}
    where
        is_loaded
        and batch_completed_at <= {{ dayclose.as_of_at() }}

),

registered_through as (

    -- how far each source's registry reaches: the end of its latest batch (no row for a
    -- source whose job has not run in this warehouse yet)
    select
        cast(null as {{ dbt.type_string() }}) as source_name,
        cast(null as {{ dbt.type_timestamp() }}) as registered_through_at
    where 1 = 0
    {%- if sales_built %}

    union all

    select
        'sales' as source_name,
        max(batch_completed_at) as registered_through_at
    from {{ ref('int_sales_deduplicated') }}
    where batch_id = (select max(batch_id) from {{ ref('int_sales_deduplicated') }})
    {%- endif %}
    {%- if units_built %}

    union all

    select
        'units' as source_name,
        max(batch_completed_at) as registered_through_at
    from {{ ref('int_units_deduplicated') }}
    where batch_id = (select max(batch_id) from {{ ref('int_units_deduplicated') }})
    {%- endif %}

),

batches_to_summarize as (

    -- the batches the registries hold, not summarized in their loaded version yet
    select batch_loads.*

    from batch_loads
    inner join registered_through
        on
            batch_loads.source_name = registered_through.source_name
            and batch_loads.batch_completed_at <= registered_through.registered_through_at
    {% if is_incremental() -%}
    where not exists (
        select 1 from {{ this }} as summaries
        where
            summaries.source_name = batch_loads.source_name
            and summaries.batch_id = batch_loads.batch_id
            and summaries.manifest_sha256 = batch_loads.manifest_sha256
    )
    {%- endif %}

),

arrivals as (

    -- the first arrivals those batches brought, found by the batch
    select
        source_name,
        batch_id,
        cast(null as date) as event_date,
        batch_completed_at as received_at
    from batches_to_summarize
    where 1 = 0
    {%- if sales_built %}

    union all

    select
        'sales' as source_name,
        batch_id,
        sale_date as event_date,
        received_at
    from {{ ref('int_sales_deduplicated') }}
    where
        batch_id in (select batch_id from batches_to_summarize where source_name = 'sales')
        and batch_id >= (select min(batch_id) from batches_to_summarize where source_name = 'sales')
    {%- endif %}
    {%- if units_built %}

    union all

    select
        'units' as source_name,
        batch_id,
        production_date as event_date,
        received_at
    from {{ ref('int_units_deduplicated') }}
    where
        batch_id in (select batch_id from batches_to_summarize where source_name = 'units')
        and batch_id >= (select min(batch_id) from batches_to_summarize where source_name = 'units')
    {%- endif %}

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
        batches_to_summarize.source_name,
        batches_to_summarize.batch_id,
        batches_to_summarize.manifest_sha256,
        batches_to_summarize.batch_completed_at,
        arrivals_per_batch.first_event_date,
        arrivals_per_batch.last_received_at,
        cast(coalesce(arrivals_per_batch.events, 0) as bigint) as events

    from batches_to_summarize
    left join arrivals_per_batch
        on
            batches_to_summarize.source_name = arrivals_per_batch.source_name
            and batches_to_summarize.batch_id = arrivals_per_batch.batch_id

)

select * from final
