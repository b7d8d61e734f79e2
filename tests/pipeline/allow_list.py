"""Loading under weights_only with torch's process-wide allow-list emptied, for tests of the saved artifacts."""

from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def empty_allow_list():
    """weights_only with nothing allowed beyond torch's own tensors and containers.

    Importing torch_geometric adds its classes (HeteroData, EdgeIndex, Index, ...) to torch's process-wide
    allow-list, so a plain ``torch.load(weights_only=True)`` in this process is not allow-list free.
    """
    saved = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        yield
    finally:
        torch.serialization.add_safe_globals(saved)
