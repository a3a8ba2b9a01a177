{#
    The keys besides the contract's fields that the lines of each loaded batch carried: a
    producer that added a field. Such lines are counted (unless the source sets strict_fields,
    then they are unknown_field dead letters); this names the new keys, so that the contract
    can follow the producer. One row per batch and set of new keys; the batch's lines without
    any have a row with new_fields null, which marks the batch as read. Incremental: the batches
    loaded (or loaded again) since the last build, each replacing its earlier rows.
#}
{{ config(tags=['sales']) }}

with

decoded as (

    select * from {{ ref('int_sale_lines_decoded') }}
    {% if is_incremental() -%}
    where
        batch_loaded_at > (
            select coalesce(max(batch_loaded_at), cast('1900-01-01' as {{ dbt.type_timestamp() }}))
            from {{ this }}
        )
    {%- endif %}

),

final as (

    select
        batch_id,
        cast(batch_arrived_at as date) as arrival_date,
        new_fields,
        max(batch_loaded_at) as batch_loaded_at,
        max(batch_completed_at) as batch_completed_at,
        cast(count(*) as bigint) as line_count,
        cast(sum(case when decode_error_kind is null then 1 else 0 end) as bigint) as decoded_line_count

    from decoded
    group by batch_id, cast(batch_arrived_at as date), new_fields

)

select * from final
