"""Pandera schemas for every stage boundary of badpoints, and the one error type.

``schemas`` never imports ``pipeline``: the schemas describe data, the pipeline
produces it.
"""

from schemas.errors import StageError, value_classes
from schemas.raw import (
    Admissions,
    LabEvents,
    LabItems,
    RawAdmissions,
    RawLabEvents,
    RawLabItems,
)

__all__ = [
    "Admissions",
    "LabEvents",
    "LabItems",
    "RawAdmissions",
    "RawLabEvents",
    "RawLabItems",
    "StageError",
    "value_classes",
]
