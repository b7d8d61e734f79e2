"""What an engine is opened with, each option declared once with its default (:class:`EngineOptions`), and what the
registry holds of an engine (:class:`EngineKind`: its name, how it is opened, which options it reads). The
registry itself, which names every engine, is :mod:`pipeline.engines.registry`."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, ContextManager, Iterable

from pipeline.kernel.engine import Engine
from pipeline.kernel.options import Section, setting


@dataclass(frozen=True)
class EngineOptions(Section):
    """The options an engine is opened with: the CLI's ``--workers``, ``--memory-limit``, ``--partitions`` and
    ``--scheduler`` take their defaults from here (``-q`` sets ``logs``), and each engine reads those its kind
    declares. Checked when made, as a config section is (``[engine] workers must be a whole number >= 1``)."""

    NAME = "engine"
    workers: int = setting(int, 2, low=1, doc="""
        Processes of this machine that work on the parts (1: this process only); a LocalCluster's worker processes.""")
    memory_limit: str = setting(str, "4GB", doc="A Dask LocalCluster's memory per worker.")
    partitions: int | None = setting(int, None, low=1, doc="""
        How many admission-range parts LABEVENTS is cut into; given, it wins over rows_per_part.""")
    rows_per_part: int = setting(int, 1_000_000, low=1, doc="""
        About how many LABEVENTS rows a part holds, when partitions is not given.""")
    scheduler: str | None = setting(str, None, doc="""
        An existing Dask scheduler's address (none: a fresh LocalCluster on loopback).""")
    logs: str = setting(str, "warning", words=("warning", "error"), doc="""
        What a LocalCluster's own processes (its scheduler, nannies and workers) log on stderr: warnings and errors,
        or errors only (the CLI's -q).""")

    @property
    def part_rows(self) -> int | None:
        """The rows a part holds at most, or None when ``partitions`` counts the parts: an explicit count of parts
        wins over ``rows_per_part``. Every engine that cuts parts reads this, never the two options apart."""
        return None if self.partitions else self.rows_per_part

    def parts_for(self, rows: int) -> int:
        """How many parts ``rows`` rows are cut into: ``partitions``, or as many as :attr:`part_rows` needs (at
        least one)."""
        if self.part_rows is None:
            return max(1, self.partitions or 1)
        return max(1, -(-rows // self.part_rows))

    def only(self, names: Iterable[str]) -> "EngineOptions":
        """These options with only ``names`` kept, every other at its default: what an engine that reads ``names``
        is opened with."""
        kept = set(names)
        unknown = kept - {option.name for option in fields(self)}
        if unknown:
            raise ValueError(f"no engine option named {', '.join(sorted(unknown))}")
        return replace(type(self)(), **{name: getattr(self, name) for name in kept})

    @classmethod
    def given(cls, options: "EngineOptions | None" = None, **changes: Any) -> "EngineOptions":
        """``options`` (the defaults when None) with ``changes`` made: how an engine's factory takes its options,
        whole or a few by name (``parts_engine(partitions=3, workers=1)``)."""
        return replace(options or cls(), **changes)


@dataclass(frozen=True)
class EngineKind:
    """An engine as the registry holds it: the name ``--engine`` takes; ``opens``, which opens the engine with the
    options it reads and closes it afterwards (a context manager that yields it); ``reads``, the names of the
    :class:`EngineOptions` it reads (it is opened with the others at their defaults); ``doc``, what it is, as
    ``--engine``'s help says it; ``starts``, what starts when it opens, as a failure to open it is said ("the Dask
    cluster did not start"; by default "the NAME engine")."""

    name: str
    opens: Callable[[EngineOptions], ContextManager[Engine]]
    reads: tuple[str, ...] = ()
    doc: str = ""
    starts: str = ""

    def __post_init__(self) -> None:
        EngineOptions().only(self.reads)  # an option it reads that does not exist fails here, where it is declared
        if not self.starts:
            object.__setattr__(self, "starts", f"the {self.name} engine")
