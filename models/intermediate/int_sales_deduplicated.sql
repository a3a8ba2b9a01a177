{#-
    Each valid sale once, at its first arrival over the whole history: a resent sale (same
    event_id), on whatever day and in whatever batch, is a copy and counts never again
    (docs/decisions/0002-first-arrival-registry.md).

    Incremental: a night reads the valid lines of the batches loaded since the last build and
    the registered first arrivals of their sales, so its cost follows the new data, not the
    history. It returns only what changes (strategy first_arrivals,
    macros/materializations/first_arrivals.sql): new sales, and revised ones (is_revised: a
    batch loaded late held an earlier copy, or the registered first arrival's batch came again
    with a new manifest), which replace their registered row. A sale whose every copy went with
    such a batch returns in batch '(vanished)', which replaces its row and is then deleted.
-#}

-- depends_on: {{ ref('stg_landing__batch_loads') }}

with

sale_lines as (

    select * from {{ ref('int_sale_lines_validated') }}
    where is_valid

),

{%- if is_incremental() %}

batch_loads as (

    -- the batches loaded (or loaded again) since the last build
    select * from {{ ref('stg_landing__batch_loads') }}
    where
        source_name = 'sales'
        and is_loaded
        and loaded_at > (
            select coalesce(max(batch_loaded_at), cast('1900-01-01' as {{ dbt.type_timestamp() }}))
            from {{ this }}
        )

),
{%- endif %}

new_lines as (

    select
        event_id,
        batch_id,
        batch_loaded_at,
        batch_completed_at,
        file_name,
        line_number,
        received_at,
        sold_at,
        sale_date,
        shop_id,
        amount,
        {{ dayclose.event_hash(['event_id']) }} as event_hash,
        0 as is_registered,
        0 as replaces_registered

    from sale_lines
    {% if is_incremental() -%}
    where
        batch_id in (select batch_id from batch_loads)
        and batch_id >= (select min(batch_id) from batch_loads)
    {%- endif %}

),
{%- if is_incremental() %}

replaced_sales as (

    -- the registered sales whose first arrival is in a batch loaded again (a new manifest)
    select
        event_id,
        event_hash

    from {{ this }}
    where
        batch_id in (select batch_id from batch_loads)
        and batch_id >= (select min(batch_id) from batch_loads)

),

copies_of_replaced as (

    -- every valid copy left of those sales, which replaces their registered row, and a
    -- placeholder ranked after any copy: a sale with no copy left keeps only the placeholder
    select
        sale_lines.event_id,
        sale_lines.batch_id,
        sale_lines.batch_loaded_at,
        sale_lines.batch_completed_at,
        sale_lines.file_name,
        sale_lines.line_number,
        sale_lines.received_at,
        sale_lines.sold_at,
        sale_lines.sale_date,
        sale_lines.shop_id,
        sale_lines.amount,
        replaced_sales.event_hash,
        0 as is_registered,
        1 as replaces_registered

    from sale_lines
    inner join replaced_sales
        on sale_lines.event_id = replaced_sales.event_id

    union all

    select
        event_id,
        '(vanished)' as batch_id,
        cast(null as {{ dbt.type_timestamp() }}) as batch_loaded_at,
        cast(null as {{ dbt.type_timestamp() }}) as batch_completed_at,
        cast(null as {{ dbt.type_string() }}) as file_name,
        cast(null as {{ dbt.type_bigint() }}) as line_number,
        cast(null as {{ dbt.type_timestamp() }}) as received_at,
        cast(null as {{ dbt.type_timestamp() }}) as sold_at,
        cast(null as date) as sale_date,
        cast(null as {{ dbt.type_string() }}) as shop_id,
        cast(null as decimal(18, 2)) as amount,
        event_hash,
        0 as is_registered,
        1 as replaces_registered

    from replaced_sales

),

registered as (

    -- the registered first arrivals of the new lines' sales (but the replaced ones): their
    -- place in the arrival order, as a registered one that stays first is not returned
    select
        registry.event_id,
        registry.batch_id,
        cast(null as {{ dbt.type_timestamp() }}) as batch_loaded_at,
        cast(null as {{ dbt.type_timestamp() }}) as batch_completed_at,
        registry.file_name,
        registry.line_number,
        registry.received_at,
        cast(null as {{ dbt.type_timestamp() }}) as sold_at,
        cast(null as date) as sale_date,
        cast(null as {{ dbt.type_string() }}) as shop_id,
        cast(null as decimal(18, 2)) as amount,
        registry.event_hash,
        1 as is_registered,
        1 as replaces_registered

    from {{ this }} as registry
    where
        {{ dayclose.event_among('registry', ['event_id'], 'new_lines') }}
        and registry.batch_id not in (select batch_id from batch_loads)

),
{%- endif %}

candidates as (

    select * from new_lines
    {%- if is_incremental() %}
    union all
    select * from copies_of_replaced
    union all
    select * from registered
    {%- endif %}

),

ranked as (

    -- each candidate's place in its sale's arrival order (one window: a CTE referenced more
    -- than once is computed once per reference on Spark)
    select
        *,
        row_number() over (
            partition by event_id
            order by
                case when batch_id = '(vanished)' then 1 else 0 end,
                batch_id,
                received_at,
                file_name,
                line_number
        ) as arrival_rank,
        max(replaces_registered) over (partition by event_id) as has_registered_row

    from candidates

),

final as (

    -- the first copy of each sale, but a registered one that stays first (nothing changes)
    select
        event_id,
        batch_id,
        batch_loaded_at,
        batch_completed_at,
        file_name,
        line_number,
        received_at,
        sold_at,
        sale_date,
        shop_id,
        amount,
        event_hash,
        has_registered_row = 1 as is_revised

    from ranked
    where arrival_rank = 1 and is_registered = 0

)

-- in the order of the sales' days, so that the registry grows in that order and a look-up of
-- some days' sales reads only those days' storage (row groups on DuckDB)
select * from final
order by sale_date
