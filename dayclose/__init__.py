"""dayclose: the orchestration shim around the dbt project.

Python lands files, calls dbt, orchestrates and prints; the business logic
lives in the dbt SQL at the repository root.
"""

__version__ = "0.1.0"
