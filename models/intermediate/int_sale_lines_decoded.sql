{#-
    Every sales line decoded once, by the landing contract (docs/contract.md), in the nightly
    run after its batch was loaded; a batch replaced by a new manifest is decoded again whole
    (delete+insert by batch_id). A line keeps the contract when it is one flat JSON object with
    these fields, each once, each value of its kind:
    event_id (id), shop_id (id), sold_at (timestamp), received_at (timestamp), amount (decimal).
    A key that is no field (a producer that added one) is tolerated and named in new_fields,
    unless the source's strict_fields is true (then the line is an unknown_field dead letter).
-#}
{#- the fields of a line, in the order the contract's writers write them, and their kinds -#}
{%- set fields = {
    'event_id': 'id',
    'shop_id': 'id',
    'sold_at': 'timestamp',
    'received_at': 'timestamp',
    'amount': 'decimal',
} -%}
{%- set strict_fields = dayclose.strict_fields('sales') -%}

with

batch_loads as (

    select * from {{ ref('stg_landing__batch_loads') }}
    where
        source_name = 'sales'
        and is_loaded
    {% if is_incremental() -%}
        -- the batches loaded (or loaded again) since the last build
        and loaded_at > (
            select coalesce(max(batch_loaded_at), cast('1900-01-01' as {{ dbt.type_timestamp() }}))
            from {{ this }}
        )
    {%- endif %}

),

sale_lines as (

    select * from {{ ref('stg_landing__sale_lines') }}
    {% if is_incremental() -%}
    where
        batch_id in (select batch_id from batch_loads)
        -- a bound on the batch itself lets every engine skip older batches' storage
        and batch_id >= (select min(batch_id) from batch_loads)
    {%- endif %}

),

lines as (

    -- is_plain_line: written exactly as the contract's writers write a line, as nearly every
    -- line is, which spares it the general checks (on DuckDB and Spark; on Postgres every line
    -- is checked the general way)
    select
        sale_lines.*,
        batch_loads.loaded_at as batch_loaded_at,
        batch_loads.batch_completed_at,
        sale_lines.byte_error is null
        and {{ dayclose.is_plain_json_line('sale_lines.raw_line', fields) }} as is_plain_line

    from sale_lines
    inner join batch_loads
        on sale_lines.batch_id = batch_loads.batch_id

),

shaped as {{ dayclose.materialized_cte() }} (

    -- a plain line is one flat JSON object; any other line is checked by the whole grammar
    select
        *,
        case
            when is_plain_line then true
            else byte_error is null and {{ dayclose.is_flat_json_object('raw_line') }}
        end as is_flat_object

    from lines

),

tokens as {{ dayclose.materialized_cte() }} (

    -- each field's value exactly as written in the line, null when absent; a key written
    -- twice and a key that is no field
    {{ dayclose.json_object_tokens('shaped', fields.keys() | list) }}

),

checked as {{ dayclose.materialized_cte() }} (

    select
        *,
        {{ dayclose.token_is_valid('token_event_id', 'id', 'is_plain_line') }} as is_event_id_valid,
        {{ dayclose.token_is_valid('token_shop_id', 'id', 'is_plain_line') }} as is_shop_id_valid,
        {{ dayclose.token_is_valid('token_sold_at', 'timestamp', 'is_plain_line') }} as is_sold_at_valid,
        {{ dayclose.token_is_valid('token_received_at', 'timestamp', 'is_plain_line') }} as is_received_at_valid,
        {{ dayclose.token_is_valid('token_amount', 'decimal', 'is_plain_line') }} as is_amount_valid

    from tokens

),

verdicts as {{ dayclose.materialized_cte() }} (

    select
        *,
        case
            when byte_error is not null then 'not_text'
            when not is_flat_object and {{ dayclose.is_blank_line('raw_line') }} then 'empty_line'
            when not is_flat_object then 'not_json_object'
            when duplicated_key is not null then 'duplicate_field'
            {%- if strict_fields %}
            when unknown_key is not null then 'unknown_field'
            {%- endif %}
            when
                token_event_id is null or token_event_id = 'null'
                or token_shop_id is null or token_shop_id = 'null'
                or token_sold_at is null or token_sold_at = 'null'
                or token_received_at is null or token_received_at = 'null'
                or token_amount is null or token_amount = 'null'
                then 'missing_field'
            when
                not is_event_id_valid
                or not is_shop_id_valid
                or not is_sold_at_valid
                or not is_received_at_valid
                or not is_amount_valid
                then 'bad_value'
        end as decode_error_kind

    from checked

),

reasons as (

    select
        *,
        case
            when decode_error_kind = 'not_text' then byte_error
            when decode_error_kind in ('empty_line', 'not_json_object')
                then {{ dayclose.not_a_flat_object_reason('raw_line') }}
            when decode_error_kind = 'duplicate_field' then {{ dbt.concat(["'duplicate field '", 'duplicated_key']) }}
            when decode_error_kind = 'unknown_field' then {{ dbt.concat(["'unknown field '", 'unknown_key']) }}
            when decode_error_kind is not null
                then concat_ws(
                    '; ',
                    {{ dayclose.field_error('token_event_id', 'event_id', 'id', 'is_event_id_valid') }},
                    {{ dayclose.field_error('token_shop_id', 'shop_id', 'id', 'is_shop_id_valid') }},
                    {{ dayclose.field_error('token_sold_at', 'sold_at', 'timestamp', 'is_sold_at_valid') }},
                    {{ dayclose.field_error('token_received_at', 'received_at', 'timestamp', 'is_received_at_valid') }},
                    {{ dayclose.field_error('token_amount', 'amount', 'decimal', 'is_amount_valid') }}
                )
        end as decode_error

    from verdicts

),

decoded as (

    -- the typed values of the lines that keep the contract
    select
        *,
        case when decode_error_kind is null then {{ dayclose.token_value('token_event_id', 'id') }} end as event_id,
        case when decode_error_kind is null then {{ dayclose.token_value('token_shop_id', 'id') }} end as shop_id,
        case
            when decode_error_kind is null then {{ dayclose.token_value('token_sold_at', 'timestamp') }}
        end as sold_at,
        case
            when decode_error_kind is null then {{ dayclose.token_value('token_received_at', 'timestamp') }}
        end as received_at,
        case when decode_error_kind is null then {{ dayclose.token_value('token_amount', 'decimal') }} end as amount

    from reasons

),

final as (

    select
        batch_id,
        batch_loaded_at,
        batch_arrived_at,
        batch_completed_at,
        file_name,
        line_number,
        decode_error_kind,
        decode_error,
        new_fields,
        event_id,
        shop_id,
        sold_at,
        received_at,
        amount,
        cast(sold_at as date) as sale_date

    from decoded

)

select * from final
