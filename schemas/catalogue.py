"""What a check is (:class:`CheckInfo`), its severities, and why some stay errors: what a schema module needs to
declare its checks (``CHECKS``). :mod:`schemas.checks` puts every module's together into the catalogue."""

from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"
WARNING = "warning"
INFO = "info"  # reported, never changes the status (fills, merges, attrition)
OFF = "off"
SEVERITIES = (ERROR, WARNING, INFO, OFF)

# Why some checks stay errors whatever the config says: a run that reported them as anything less would lie.
# The config's [severity] may set these checks to "error" only; `badpoints checks` and the README say which.
CANNOT_RUN = "cannot run"
NOT_READ = "table not read"
STOPS = "stops the stages"
GRAPH_FILE = "graph file"
LOCKED = {
    CANNOT_RUN: "badpoints could not run at all (exit 2)",
    NOT_READ: "the table was not read, so no stage ran on it",
    STOPS: "the stage that finds it stops there: no later stage runs and no graph is written",
    GRAPH_FILE: "without it a written graph file could be corrupt (inf or NaN, indices out of bounds, "
                "tensors of the wrong shape, an unsafe pickle)",
}


@dataclass(frozen=True)
class CheckInfo:
    """What a check finds, how bad it is by default, and what the user should do.

    ``locked`` names why the config may not set the check below error (a key of :data:`LOCKED`), or is None.
    """

    id: str
    stage: str
    severity: str
    title: str
    advice: str
    locked: str | None = None
