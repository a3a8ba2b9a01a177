{#
    Reconciliation gate: for every production date the run rebuilt, the good
    units per SKU equal the valid, deduplicated source units with verdict good,
    exactly. Rows returned name the day, the SKU and both counts.
#}
{{ config(tags=['gate', 'units']) }}

{%- set rebuilt = dayclose.rebuilt_range('units') -%}

with

unit_lines as (

    select * from {{ ref('int_unit_lines_validated') }}
    where
        is_valid
        and event_at >= {{ dayclose.timestamp_literal(rebuilt[0] ~ ' 00:00:00') }}
        and event_at < {{ dayclose.timestamp_literal(rebuilt[1] ~ ' 00:00:00') }}

),

published as (

    select * from {{ ref('daily_good_units') }}
    where
        production_date >= cast('{{ rebuilt[0] }}' as date)
        and production_date < cast('{{ rebuilt[1] }}' as date)

),

distinct_units as (

    select
        line_id,
        plc_seq,
        min(production_date) as production_date,
        min(sku) as sku,
        min(verdict) as verdict

    from unit_lines
    group by line_id, plc_seq

),

expected as (

    select
        production_date,
        sku,
        sum(case when verdict = 'good' then 1 else 0 end) as good_units

    from distinct_units
    group by production_date, sku

),

final as (

    select
        coalesce(expected.production_date, published.production_date) as production_date,
        coalesce(expected.sku, published.sku) as sku,
        expected.good_units as source_good_units,
        published.good_units as published_good_units

    from expected
    full outer join published
        on
            expected.production_date = published.production_date
            and expected.sku = published.sku
    where coalesce(expected.good_units, 0) <> coalesce(published.good_units, 0)

)

select * from final
