"""A ``torch_geometric.data.Dataset`` over one split of a build: what a training loop iterates.

``GraphDataset(OUT_DIR, split="train")`` reads the manifest once and nothing else;
``get(i)`` reads batch ``i``'s file once, refuses it unless its sha256 is the
manifest's, loads it with ``torch.load(weights_only=True)`` and re-guards it, as
:func:`pipeline.output.write.load_graphs` does for a whole split. It never downloads,
processes or writes: the build folder is only read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from torch_geometric.data import Dataset, HeteroData

from pipeline.output.write import limits_of, load_graph, read_manifest
from schemas.split import SPLITS


class GraphDataset(Dataset):
    """The graphs of one split of a finished build, one batch of admissions per item, loaded lazily."""

    def __init__(self, out_dir: Path | str, split: str = "train", *,
                 transform: Callable[[HeteroData], HeteroData] | None = None) -> None:
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
        self.features: dict[str, list[str]] = manifest["features"]
        self.entries = sorted((entry for entry in manifest["graphs"] if entry["split"] == split),
                              key=lambda entry: entry["batch"])

    def len(self) -> int:
        """The number of batches of the split."""
        return len(self.entries)

    def get(self, idx: int) -> HeteroData:
        """Batch ``idx``: read once, hash-checked against the manifest, loaded with weights_only=True, guarded."""
        return load_graph(self.out_dir, self.manifest, self.entries[idx], self.limits)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.out_dir)!r}, split={self.split!r}, batches={len(self)})"
