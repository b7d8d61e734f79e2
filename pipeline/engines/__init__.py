"""Where LABEVENTS is worked on: in this process on whole frames (pandas, the default), or on parts of it kept as
Arrow files, each part worked on in this process or its worker processes (parts) or by the workers of a
``dask.distributed`` cluster (Dask). Every engine follows one protocol (:class:`Engine`, in ``base``) and declares
what it can do; each lives in a module of its own, and the registry (``registry``) names them all: open one with
:func:`open_engine` and :class:`EngineOptions`."""

from pipeline.engines.dask import DaskEngine, dask_engine
from pipeline.engines.options import EngineKind, EngineOptions
from pipeline.engines.pandas import PANDAS, PandasEngine
from pipeline.engines.parts import PartsEngine, parts_engine
from pipeline.engines.registry import (AUTO, ENGINES, InputSize, auto_name, in_parts, labevents_size, meds_size,
                                       names, open_engine, register, resolve)
from pipeline.engines.stored import Stored
from pipeline.kernel.engine import Engine

__all__ = ["AUTO", "ENGINES", "PANDAS", "DaskEngine", "Engine", "EngineKind", "EngineOptions", "InputSize",
           "PandasEngine", "PartsEngine", "Stored", "auto_name", "dask_engine", "in_parts", "labevents_size",
           "meds_size", "names", "open_engine", "parts_engine", "register", "resolve"]
