{#
    Warns when a plant's share of dead-lettered lines, among the lines that
    arrived in the last units_window_days days, is above dead_letter_share_warn
    (1% by default). Lines whose line_id is unknown belong to no plant and are
    left out here (warn_dead_letters_rising counts them). A failing sensor or a broken PLC export shows here first.
#}
{{ config(tags=['gate', 'units'], severity='warn') }}

{%- set since = dayclose.as_of_day(-dayclose.window_days('units')) -%}

with

unit_lines as (

    select * from {{ ref('int_unit_lines_validated') }}
    where batch_completed_at > cast('{{ since }}' as {{ dbt.type_timestamp() }})

),

per_plant as (

    select
        plant_id,
        count(*) as lines_received,
        sum(case when is_valid then 0 else 1 end) as lines_dead_lettered

    from unit_lines
    where plant_id is not null
    group by plant_id

),

final as (

    select
        plant_id,
        lines_received,
        lines_dead_lettered,
        cast(lines_dead_lettered as {{ dbt.type_numeric() }}) / lines_received as dead_letter_share

    from per_plant
    where lines_dead_lettered > {{ var('dead_letter_share_warn') }} * lines_received

)

select * from final
