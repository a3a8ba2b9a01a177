{#
    Incremental strategy first_arrivals, of the first-arrival registries (config
    incremental_strategy: first_arrivals, unique_key: the event key). The model's select returns
    new events and revised ones (is_revised); only the revised ones have a registered row, which
    is deleted before the insert. delete+insert would look every new event up in the whole
    registry to delete nothing; here the look-up is for the revised events only, most nights none.
#}
{% macro get_incremental_first_arrivals_sql(arg_dict) %}
    {%- set keys = arg_dict["unique_key"] -%}
    {%- set keys = [keys] if keys is string else keys -%}
    {%- set dest_cols_csv = get_quoted_csv(arg_dict["dest_columns"] | map(attribute="name")) -%}

    delete from {{ arg_dict["target_relation"] }} as registered
    using (select {{ keys | join(', ') }} from {{ arg_dict["temp_relation"] }} where is_revised) as revised
    where {% for k in keys %}registered.{{ k }} = revised.{{ k }}{{ ' and ' if not loop.last }}{% endfor %};

    insert into {{ arg_dict["target_relation"] }} ({{ dest_cols_csv }})
    select {{ dest_cols_csv }} from {{ arg_dict["temp_relation"] }}
{% endmacro %}


{#
    pre_hook of the models rebuilt for the days a run rebuilds in one statement (the conflicting
    copies: each day needs a look-up in the whole history, which one statement for all the days
    does once): delete those days, which the model's select, limited to them, inserts again in
    the same transaction.
#}
{% macro delete_rebuilt_days(source_name, date_column) %}
    {#- Spark: nothing (its parquet tables take no delete); the model overwrites the days' partitions -#}
    {%- if is_incremental() and target.type != 'spark' -%}
        {%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
        delete from {{ this }}
        where {{ date_column }} >= cast('{{ rebuilt[0] }}' as date) and {{ date_column }} < cast('{{ rebuilt[1] }}' as date)
    {%- endif -%}
{% endmacro %}
