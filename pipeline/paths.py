"""Where a build may write: output folder rules, kept apart from the writer so the CLI loads no torch for them."""

from __future__ import annotations

from pathlib import Path

MARKER = ".badpoints"  # says the folder holds a badpoints build, so a rebuild may replace its files


class OutputError(ValueError):
    """The output folder cannot be used (inside the input, holding the input, or someone else's folder)."""


def check_output_dir(out_dir: Path, data_dir: Path) -> Path:
    """The resolved output folder, refused if it is or sits inside the input, holds the input, or holds
    someone else's files."""
    out, data = Path(out_dir).resolve(), Path(data_dir).resolve()
    if out == data or data in out.parents:
        raise OutputError(f"output folder {str(out)!r} is inside the input folder {str(data)!r}; choose another")
    if out in data.parents:
        raise OutputError(f"input folder {str(data)!r} is inside the output folder {str(out)!r}; a build replaces "
                          "its output folder's files, so choose an output folder outside the input")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists())):
        raise OutputError(f"{str(out)!r} exists and is not a badpoints build folder; badpoints will not "
                          "overwrite it. Choose an empty or new folder")
    return out
