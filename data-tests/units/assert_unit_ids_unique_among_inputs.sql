{#
    No unit id twice among daily_good_units' inputs: every copy of a unit
    (line_id, plc_seq) in the rebuilt days carries the same production time, SKU
    and verdict, so the per-day deduplication counts it exactly once. A unit
    whose copies disagree (a PLC clock reset, a reused sequence number) fails
    the gate with the unit id and what differs.
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

final as (

    select
        line_id,
        plc_seq,
        count(*) as copies,
        count(distinct event_at) as distinct_event_at,
        count(distinct sku) as distinct_skus,
        count(distinct verdict) as distinct_verdicts

    from unit_lines
    group by line_id, plc_seq
    having
        count(distinct event_at) > 1
        or count(distinct sku) > 1
        or count(distinct verdict) > 1

)

select * from final
