"""Synthetic landing data for the demo, the tests and the benchmarks (`dayclose generate`)."""

from dayclose.generate.sales import generate_sales, read_sales_truth
from dayclose.generate.units import Outage, generate_units, read_units_truth
from dayclose.generate.writer import BatchWriter, GenerateReport

__all__ = [
    "BatchWriter",
    "GenerateReport",
    "Outage",
    "generate_sales",
    "generate_units",
    "read_sales_truth",
    "read_units_truth",
]
