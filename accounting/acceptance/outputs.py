"""OUTDIR holds at most :data:`MAX_FILES` files: the summary, the JSON and PNG outputs, one archive of the rest.

A lent GPU machine hands back only a few files, so the acceptance run publishes a fixed set
(:data:`PUBLISHED`, in order of importance) and packs every log and every other output into
``logs.tar.gz``. During the run those live in ``OUTDIR/logs/`` (so a run cut short still leaves its
logs); at the end the folder becomes the archive. Anything else found in OUTDIR beyond the limit is
moved into the archive too, least important first, and named.

>>> over_limit(["summary.md", "summary.json", "a.json", "b.json"], limit=3)
['b.json']
"""

import shutil
import tarfile
from pathlib import Path

from accounting.errors import AccountingError

MAX_FILES = 8
LOGS_DIR = "logs"
ARCHIVE = "logs.tar.gz"
SUMMARY_MD, SUMMARY_JSON = "summary.md", "summary.json"
PUBLISHED = (SUMMARY_MD, SUMMARY_JSON, "report.json", "pytest-gpu.json", "fleet.json", "report.png", ARCHIVE)
"""What OUTDIR keeps, most important first (the archive always stays: it has the logs)."""


def check_outdir(path: Path) -> Path:
    """Create OUTDIR, or accept it empty: a run's files must not mix with an earlier run's."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise AccountingError(f"OUTDIR {str(path)!r} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        count = sum(1 for _ in path.iterdir())
        raise AccountingError(f"OUTDIR {str(path)!r} is not empty ({count} entries): give a new or empty directory, "
                              "so this run's files do not mix with another's")
    (path / LOGS_DIR).mkdir(parents=True, exist_ok=True)
    return path


def over_limit(names, *, limit: int = MAX_FILES, keep=PUBLISHED) -> list[str]:
    """The names that do not fit in ``limit`` files: those outside ``keep`` first, then ``keep``'s least important.

    The archive (the last of ``keep``) is never among them.
    """
    names = list(dict.fromkeys(names))
    order = {name: index for index, name in enumerate(keep)}
    # the archive first, then keep's order, then the rest by name: the first `limit` stay
    ranked = sorted(names, key=lambda name: (0 if name == ARCHIVE else 1, order.get(name, len(keep)), name))
    return ranked[limit:]


def pack(out: Path, *, limit: int = MAX_FILES) -> list[str]:
    """Move OUTDIR's files beyond ``limit`` into ``logs/``, archive ``logs/`` as ``logs.tar.gz``, remove it.

    Returns the names moved. Raises if OUTDIR still holds more than ``limit`` files (a folder a step made).
    """
    out = Path(out)
    logs = out / LOGS_DIR
    logs.mkdir(exist_ok=True)
    files = [entry.name for entry in out.iterdir() if entry.name != LOGS_DIR]
    moved = over_limit([*files, ARCHIVE], limit=limit)
    for name in moved:
        shutil.move(str(out / name), str(logs / name))
    with tarfile.open(out / ARCHIVE, "w:gz") as archive:
        archive.add(logs, arcname=LOGS_DIR)
    shutil.rmtree(logs)
    left = sorted(entry.name for entry in out.iterdir())
    if len(left) > limit:
        raise AccountingError(f"OUTDIR holds {len(left)} entries, more than {limit}: {', '.join(left)}")
    return moved
