"""The file a ``--plot`` flag writes (`kvpilot backtest`, `kvpilot demo`), checked before minutes of replay.

matplotlib picks the image type from the name's suffix: without one it wrote ``<name>.png`` without a word (the
demo then said "plot written to <name>"), and an unknown suffix failed only after the replay, with a traceback."""

from __future__ import annotations

from pathlib import Path


def plot_file(flag: str | Path) -> Path:
    """The path ``--plot flag`` writes: ``flag``, with ``.png`` added when it has no suffix. Raises ValueError with
    the line to print when the folder does not exist, the path is a folder or cannot be written, or matplotlib writes
    no such type."""
    path = Path(flag)
    if not path.suffix:
        path = path.with_name(f"{path.name}.png")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise ValueError(f"--plot {flag}: folder {folder} does not exist")
    if path.is_dir():
        raise ValueError(f"--plot {flag}: {path} is a folder")
    existed = path.exists()
    if existed and not path.is_file():  # a FIFO would hold the open below until something reads it
        raise ValueError(f"--plot {flag}: {path} is not a regular file")
    try:  # can it be made there (a folder that takes no files: /proc, read-only, not ours)? Nothing is written to it
        with path.open("ab"):
            pass
    except OSError as e:
        raise ValueError(f"--plot {flag}: {e.strerror or e}") from None
    if not existed:
        path.unlink(missing_ok=True)
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in kinds:
        raise ValueError(
            f"--plot {flag}: matplotlib writes no {path.suffix} files (png, or one of {', '.join(sorted(kinds))})"
        )
    return path
