{#
    Gate matches_load_ledger, on a landing table: nothing lost in landing. Every batch
    the load ledger records as loaded for `source_name` has exactly its recorded number
    of lines in the table (no batch half written, none written twice). Checked for the
    batches of the last late_arrival_scan_days days, so the nightly cost follows the window.
#}
{% test matches_load_ledger(model, source_name) %}

{%- set since = dayclose.as_of_day(-var('late_arrival_scan_days')) ~ 'T00' -%}

with

ledger as (

    select * from {{ source('landing', 'load_ledger') }}
    where source_name = '{{ source_name }}' and status = 'loaded' and batch_id >= '{{ since }}'

),

lines as (

    select
        batch_id,
        count(*) as lines_in_table

    from {{ model }}
    where batch_id >= '{{ since }}'
    group by batch_id

),

final as (

    select
        coalesce(ledger.batch_id, lines.batch_id) as batch_id,
        ledger.rows_loaded as lines_in_ledger,
        lines.lines_in_table

    from ledger
    full outer join lines
        on ledger.batch_id = lines.batch_id
    where
        ledger.rows_loaded is null
        or ledger.rows_loaded <> coalesce(lines.lines_in_table, 0)

)

select * from final

{% endtest %}
