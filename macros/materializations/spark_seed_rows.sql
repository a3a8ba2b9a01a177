{#
    dbt-spark's seed loading (spark__load_csv_rows), overridden for one reason: its session
    connection puts each value into the insert between quotes without escaping a quote inside it,
    so a seed value such as `New Year's Day` breaks the statement. Here every value is written as
    a Spark string literal, backslashes and quotes escaped, cast to its column's type, null as null;
    the same batches of rows, the same SQL returned for the compiled file.
#}
{% macro spark__load_csv_rows(model, agate_table) %}
    {%- set column_override = model['config'].get('column_types', {}) -%}
    {%- set types = [] -%}
    {%- for col_name in agate_table.column_names -%}
        {%- do types.append(column_override.get(col_name, adapter.convert_type(agate_table, loop.index0))) -%}
    {%- endfor -%}
    {%- set statements = [] -%}
    {%- for chunk in agate_table.rows | batch(get_batch_size()) -%}
        {%- set sql -%}
            insert into {{ this.render() }} values
            {% for row in chunk -%}
                ({%- for value in row -%}
                    {%- if value is none -%}null{%- else -%}
                        cast('{{ (value | string).replace("\\", "\\\\").replace("'", "\\'") }}' as {{ types[loop.index0] }})
                    {%- endif -%}{{ ',' if not loop.last }}
                {%- endfor -%}){{ ',' if not loop.last }}
            {%- endfor %}
        {%- endset -%}
        {%- do adapter.add_query(sql, abridge_sql_log=True) -%}
        {%- do statements.append(sql) -%}
    {%- endfor -%}
    {{ return(statements[0]) }}
{% endmacro %}
