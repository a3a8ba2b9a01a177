{#
    No silent success: every day of the run's range has rows in daily_sales,
    unless the business_calendar seed allows sales to be empty that day.
#}
{{ config(tags=['gate', 'sales']) }}

{{ dayclose.empty_days('sales', ref('daily_sales'), 'sale_date') }}
