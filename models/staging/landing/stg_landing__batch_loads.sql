{{ config(tags=['shared']) }}

with

source as (

    select * from {{ source('landing', 'load_ledger') }}

),

final as (

    select
        source_name,
        batch_id,
        status,
        manifest_sha256,
        files,
        rows_loaded,
        byte_errors,
        batch_arrived_at,
        cast({{ dbt.dateadd('hour', 1, 'batch_arrived_at') }} as {{ dbt.type_timestamp() }})
            as batch_completed_at,
        loaded_at,
        message,
        status = 'loaded' as is_loaded

    from source

)

select * from final
