"""badpoints' preprocessing pipeline, stage by stage in flow order (see ``pipeline.flow``).

Notebook use::

    from pipeline.load import load_text_tables
    from pipeline.parse import check_raw
"""

from pipeline.config import Config, load_config
from pipeline.flow import Validation, validate
from pipeline.load import load_text_tables, locate_table, read_table
from pipeline.parse import RawResult, RawTables, check_raw
from pipeline.report import Finding, Report

__all__ = [
    "Config",
    "Finding",
    "RawResult",
    "RawTables",
    "Report",
    "Validation",
    "check_raw",
    "load_config",
    "load_text_tables",
    "locate_table",
    "read_table",
    "validate",
]
