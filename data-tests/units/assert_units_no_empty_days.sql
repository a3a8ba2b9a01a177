{#
    No silent success: every day of the run's range has rows in daily_good_units,
    unless the business_calendar seed allows units to be empty that day.
#}
{{ config(tags=['gate', 'units']) }}

{{ dayclose.empty_days('units', ref('daily_good_units'), 'production_date') }}
