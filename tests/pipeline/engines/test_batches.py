"""pipeline/engines/batches.py: edge rows cut into pieces of whole batches, each read from the parts its
admissions are in."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.engines.batches import admitted_in, batch_pieces
from schemas.split import SPLITS
from tests.pipeline.engines.rows import edge_parts


@pytest.mark.parametrize("seed, cuts, batch_size", [(0, 1, 8), (1, 7, 8), (2, 40, 8), (3, 5, 1), (4, 3, 500)])
def test_batch_pieces_hold_every_admission_once_in_whole_batches(seed, cuts, batch_size):
    """Pieces begin where batches begin: their ranges take every admission once, a batch never in two pieces;
    each reads from the part its first batch begins in to the part its last admission is in, and starts at its
    split's admissions before it."""
    parts = edge_parts(seed, cuts)
    paths = [f"part-{n}" for n in range(len(parts))]
    pieces = batch_pieces([admitted_in(part) for part in parts], paths, batch_size)
    rows = pd.concat(parts, ignore_index=True).drop_duplicates()
    code = rows["SPLIT"].map({name: n for n, name in enumerate(SPLITS)}).to_numpy()
    position = rows.groupby("SPLIT").cumcount().to_numpy()
    owner = np.full(len(rows), -1)
    for n, piece in enumerate(pieces):
        for split, lo, hi in piece.ranges:
            taken = (code == split) & (rows["HADM_ID"].to_numpy() >= lo) & (rows["HADM_ID"].to_numpy() <= hi)
            assert (owner[taken] == -1).all()
            owner[taken] = n
            assert position[taken].min() == piece.start[SPLITS[split]] and piece.start[SPLITS[split]] % batch_size == 0
        part_of = {hadm: k for k, part in enumerate(parts) for hadm in part["HADM_ID"]}
        held = rows["HADM_ID"][owner == n].map(part_of)
        assert list(piece.paths) == paths[held.min():held.max() + 1]
    assert (owner >= 0).all() and (np.diff(owner) >= 0).all()
    batch = pd.Series(owner).groupby([code, position // batch_size]).nunique()
    assert (batch == 1).all()  # whole batches
    assert batch_pieces([admitted_in(part.iloc[:0]) for part in parts], paths, batch_size) == []
