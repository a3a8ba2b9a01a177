{#
    Dead letters per arrival batch and kind, small enough to publish whole and to chart, and
    the run summary's "dead-lettered in this run's batches". Incremental: the batches loaded
    (or loaded again) since the last build are counted, each replacing its earlier counts.
#}
{{ config(tags=['units']) }}

with

dead_letters as (

    select * from {{ ref('int_unit_lines_validated') }}
    where
        not is_valid
    {% if is_incremental() -%}
        and batch_loaded_at > (
            select coalesce(max(batch_loaded_at), cast('1900-01-01' as {{ dbt.type_timestamp() }}))
            from {{ this }}
        )
    {%- endif %}

),

final as (

    select
        batch_id,
        cast(batch_arrived_at as date) as arrival_date,
        dead_letter_kind,
        max(batch_loaded_at) as batch_loaded_at,
        cast(count(*) as bigint) as dead_letters

    from dead_letters
    group by batch_id, cast(batch_arrived_at as date), dead_letter_kind

)

select * from final
