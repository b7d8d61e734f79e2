"""Where LABEVENTS is worked on: in this process on whole frames (pandas, the default), or on parts of it kept as
Arrow files, each part worked on in this process or its worker processes (parts) or by the workers of a
``dask.distributed`` cluster (Dask). Every engine follows one protocol (:class:`Engine`, in ``base``) and declares
what it can do; each lives in a module of its own."""

from pipeline.engines.base import ROWS_PER_PART, in_parts
from pipeline.engines.dask import DaskEngine, dask_engine
from pipeline.engines.pandas import PANDAS, PandasEngine
from pipeline.engines.parts import PartsEngine, parts_engine
from pipeline.engines.stored import Stored
from pipeline.kernel.engine import Engine

__all__ = ["PANDAS", "ROWS_PER_PART", "DaskEngine", "Engine", "PandasEngine", "PartsEngine", "Stored", "dask_engine",
           "in_parts", "parts_engine"]
