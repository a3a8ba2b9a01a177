{{ config(tags=['units', 'lateness']) }}

{{ dayclose.late_arrival_days('units', ref('daily_good_units'), 'production_date', 'good_units + rejected_units') }}
