"""A ``torch_geometric.data.Dataset`` over one split of a build: what a training loop iterates.

``GraphDataset(OUT_DIR, split="train")`` reads the manifest once and nothing else;
``get(i)`` reads batch ``i``'s file once, refuses it unless its sha256 is the
manifest's, loads it with ``torch.load(weights_only=True)`` and re-guards it, as
:func:`pipeline.output.write.load_graphs` does for a whole split. It never downloads,
processes or writes: the build folder is only read. With ``frame=True`` each graph also
holds its features in PyTorch Frame's layout (:mod:`pipeline.output.frame`), with the
column statistics fitted on the training split whatever the split read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from torch_geometric.data import Dataset, HeteroData

from pipeline.output.write import limits_of, load_graph, read_manifest
from schemas.graph import EDGE, REVERSE
from schemas.split import SPLITS


class GraphDataset(Dataset):
    """The graphs of one split of a finished build, one batch of admissions per item, loaded lazily.

    ``features``: the manifest's description of each feature tensor's columns (name, kind, a categorical column's
    cardinality, the training statistics). ``frame=True``: each graph also has ``tf``, a ``torch_frame.TensorFrame``
    of its features, on every node type and ``edge_tf`` on every edge type; ``col_names_dict`` and
    ``col_stats_dict`` (by node type) and ``edge_col_names_dict`` and ``edge_col_stats_dict`` (by edge type) are
    what PyTorch Frame's encoders are made from."""

    def __init__(self, out_dir: Path | str, split: str = "train", *,
                 transform: Callable[[HeteroData], HeteroData] | None = None, frame: bool = False) -> None:
        if split not in SPLITS:
            raise ValueError(f"split {split!r} is not one of {', '.join(SPLITS)}")
        out_dir = Path(out_dir)
        manifest = read_manifest(out_dir)  # a StageError (graph_manifest) unless the folder is a finished build
        # No download() or process() here, so PyG's Dataset never creates raw/ or processed/ under OUT_DIR.
        super().__init__(root=None, transform=transform, log=False)
        self.out_dir = out_dir
        self.split = split
        self.manifest = manifest
        self.limits = limits_of(manifest)
        self.features: dict[str, list[dict]] = manifest["features"]
        self.entries = sorted((entry for entry in manifest["graphs"] if entry["split"] == split),
                              key=lambda entry: entry["batch"])
        self.frames = None
        if frame:
            from pipeline.output.frame import Frames  # PyTorch Frame loads only when its layout is asked for

            self.frames = Frames(self.features, ("admission", "labitem"), (EDGE, REVERSE))
            self.col_names_dict, self.col_stats_dict = self.frames.col_names_dict, self.frames.col_stats_dict
            self.edge_col_names_dict = self.frames.edge_col_names_dict
            self.edge_col_stats_dict = self.frames.edge_col_stats_dict

    def len(self) -> int:
        """The number of batches of the split."""
        return len(self.entries)

    def get(self, idx: int) -> HeteroData:
        """Batch ``idx``: read once, hash-checked against the manifest, loaded with weights_only=True, guarded (and
        with ``frame=True``, given its TensorFrames)."""
        data = load_graph(self.out_dir, self.manifest, self.entries[idx], self.limits)
        return data if self.frames is None else self.frames.attach(data)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.out_dir)!r}, split={self.split!r}, batches={len(self)})"
