{{ config(tags=['sales', 'lateness']) }}

{{ dayclose.late_arrival_days('sales', ref('daily_sales'), 'sale_date', 'sales_count') }}
