"""MEDS datasets: ``badpoints validate DIR`` on a folder with ``data/`` and ``metadata/`` (a MEDS run:
:mod:`pipeline.meds.run`), on the MEDS stage (:mod:`pipeline.meds.stage`): each shard read on its own
(:mod:`.shards`), its ``metadata/`` read (:mod:`.metadata`), the partials put together (:mod:`.combine`), what
MEDS-Transforms' normalization will make of each code predicted (:mod:`.formula`), a folder it wrote read back
(:mod:`.zscored`), every finding of ``schemas/meds.py`` (:mod:`.checks`), two folders compared (:mod:`.compare`) and
how it shows (:mod:`.view`). A build written as MEDS is a stage of the lab flow: ``pipeline.stages.meds_export``."""

from pipeline.meds.run import MedsValidation, is_meds, meds_steps, validate_meds

__all__ = ["MedsValidation", "is_meds", "meds_steps", "validate_meds"]
