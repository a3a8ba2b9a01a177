{#
    Every value daily_good_units has published, versioned: a new version of a
    (production_date, sku) is appended whenever a run changes it (a vanished
    SKU-day gets a version with 0). Append-only, so "what did we report for day D
    as of T" is the latest version with published_as_of <= T. Only the days the
    run rebuilt are compared (the nightly window, or a restatement's range), and
    a rerun that changes nothing appends nothing. A run whose gates fail removes the
    versions it appended (by run_id), so only values that were published are here.
#}
{{
    config(
        materialized='incremental',
        incremental_strategy='append',
        tags=['units'],
    )
}}

{%- set rebuilt = dayclose.rebuilt_range('units') -%}
{%- set reason = dayclose.run_var('restate_reason') or 'nightly window rebuild' -%}

with

published as (

    select
        production_date,
        sku,
        good_units

    from {{ ref('daily_good_units') }}
    where
        production_date >= cast('{{ rebuilt[0] }}' as date)
        and production_date < cast('{{ rebuilt[1] }}' as date)

),

versions as (

    {% if is_incremental() %}
        select
            production_date,
            sku,
            good_units,
            version_number

        from {{ this }}
        where
            production_date >= cast('{{ rebuilt[0] }}' as date)
            and production_date < cast('{{ rebuilt[1] }}' as date)
    {% else %}
        select
            production_date,
            sku,
            good_units,
            cast(0 as integer) as version_number

        from published
        where 1 = 0
    {% endif %}

),

versions_ranked as (

    select
        *,
        row_number() over (
            partition by production_date, sku order by version_number desc
        ) as recency

    from versions

),

latest as (

    select * from versions_ranked
    where recency = 1

),

changed as (

    select
        coalesce(published.production_date, latest.production_date) as production_date,
        coalesce(published.sku, latest.sku) as sku,
        coalesce(published.good_units, 0) as good_units,
        coalesce(latest.good_units, 0) as previous_good_units,
        coalesce(latest.version_number, 0) + 1 as version_number

    from published
    full outer join latest
        on
            published.production_date = latest.production_date
            and published.sku = latest.sku
    where
        latest.version_number is null
        or coalesce(published.good_units, 0) <> latest.good_units

),

final as (

    select
        production_date,
        sku,
        cast(version_number as integer) as version_number,
        cast(good_units as bigint) as good_units,
        cast(previous_good_units as bigint) as previous_good_units,
        {{ dayclose.as_of_at() }} as published_as_of,
        {{ dayclose.invocation_at() }} as recorded_at,
        cast('{{ dayclose.run_var("run_id") or invocation_id }}' as {{ dbt.type_string() }}) as run_id,
        cast('{{ reason | replace("'", "''") }}' as {{ dbt.type_string() }}) as reason

    from changed

)

select * from final
