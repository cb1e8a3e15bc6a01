"""The learner kit: everything a learner runs, in one zip, linked from every page of
the book.

``make book`` runs ``python tools/kit.py`` after the build, which writes
``_build/html/course-kit.zip``: the two packages (``tformer_ref``, which the lessons
import, and ``tformer_grading``, which the exercises' check cells and the self-grade
command import), the lessons and the student exercises from ``book/``, their figures, a
learner's requirements (``requirements/learner.txt``, as ``requirements.txt``),
``pyproject.toml`` (so the requirements' ``-e .`` installs the packages),
``nbgrader_config.py`` (the self-grade command finds the course folder by it),
``tools/learner_lab.py`` and a README with the set-up commands.

Never ``solutions/``: the kit is public, the answers and hidden tests are not. The kit
refuses to build if any file it would ship holds nbgrader's solution or hidden-test
markers.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TOP = "transformers-course"
DEFAULT_OUT = ROOT / "_build" / "html" / "course-kit.zip"
PACKAGES = ["tformer_ref", "tformer_grading"]
# Shipped as they are, and under another name in the kit: a learner installs only what
# the lessons, the exercises and the self-grade need (requirements/learner.txt).
FILES = ["AGENTS.md", "pyproject.toml", "nbgrader_config.py", "tools/learner_lab.py"]
RENAMED = {"requirements/learner.txt": "requirements.txt"}
BOOK_GLOBS = ["*/*.ipynb", "figures/*", "seeds/*.txt"]
# Written by nbgrader's ClearSolutions / ClearHiddenTests around what the student
# version drops.
FORBIDDEN = ["### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"]
# A fixed timestamp: the same sources give the same zip, byte for byte.
STAMP = (2026, 1, 1, 0, 0, 0)

README = """# Transformers from scratch, pitfall by pitfall: the course kit

The lessons (`book/<chapter>/lesson.ipynb`), the exercises \
(`book/<chapter>/exercise.ipynb`)
and the two packages they import. You need Python 3.10 or newer and 2 to 5 GB of disk
space (most of it PyTorch: see "Without an NVIDIA GPU" below).

## Set up (once), from this folder

Linux and macOS, in a terminal:

```bash
python3 -m venv .venv && source .venv/bin/activate
pip install -r requirements.txt && python tools/learner_lab.py
```

Windows: the simplest is WSL (Windows Subsystem for Linux: `wsl --install` in
PowerShell, then the Linux lines above in its Ubuntu terminal). Without WSL, in
PowerShell (where `py` is the Python launcher the python.org installer adds):

```powershell
py -m venv .venv; .venv\\Scripts\\Activate.ps1
pip install -r requirements.txt; python tools/learner_lab.py
```

The second line installs the pinned packages, this folder's two included, and sets up
JupyterLab for a learner (no news pop-up, no instructor tools).

**Without an NVIDIA GPU, on Linux or WSL**, install PyTorch's CPU build first (a
fraction of the several GB of the CUDA build PyPI gives Linux), then the line above:

```bash
pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
```

On macOS and Windows, PyPI's build is already the right one (PyTorch's installation
page, https://pytorch.org/get-started/locally/, gives the command for every system). The
course is tested on Linux; the macOS and Windows lines follow Python's and PyTorch's own
instructions.

## Work

```bash
source .venv/bin/activate      # Windows PowerShell: .venv\\Scripts\\Activate.ps1
jupyter lab
```

Open `book/ch01_shapes/lesson.ipynb`, then `heads.ipynb` and `exercise.ipynb` beside
it. The lessons read as in the book: figures, maths and folded answers render in
JupyterLab, and the numbers in the text are the book's run. A notebook downloaded from
a page of the book (its download button, `.ipynb`) runs here too.

Grade yourself at any time (the visible checks; your instructor's grade adds \
hidden ones):

```bash
python -m tformer_grading book/ch01_shapes/exercise.ipynb
```

On Linux the self-grade runs your notebook in a sandbox (bubblewrap) when it is
installed; elsewhere it says it ran without one, which is fine for your own code.

Using an AI coding assistant? `AGENTS.md` asks it to act as a teaching assistant: to
explain, ask questions, point to the lesson section a check names and run the checks,
not to write your answers.
{repository}"""


def repository_url(root: Path = ROOT) -> str:
    """``repository: url:`` of ``_config.yml``; "" when the course has no public one."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    return (config.get("repository") or {}).get("url") or ""


def repository_line(url: str) -> str:
    """The README's last line: the address only when there is one, never a false
    one."""
    return f"\nThe course's source: {url}\n" if url else ""


def kit_files(root: Path = ROOT) -> list[Path]:
    """Every file the kit ships, relative to the course root, in a stable order."""
    found: set[Path] = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                found.add(path.relative_to(root))
    for pattern in BOOK_GLOBS:
        for path in (root / "book").glob(pattern):
            if path.is_file() and ".ipynb_checkpoints" not in path.parts:
                found.add(path.relative_to(root))
    found.update(Path(name) for name in [*FILES, *RENAMED])
    return sorted(found)


def _refuse_solutions(rel: Path, data: bytes) -> None:
    if rel.parts[0] == "solutions":
        raise SystemExit(f"kit: {rel} is under solutions/, which is never published")
    for marker in FORBIDDEN:
        if marker.encode() in data:
            raise SystemExit(
                f"kit: {rel} holds '{marker}': a solution would be published"
            )


def _add(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(f"{TOP}/{name}", date_time=STAMP)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    archive.writestr(info, data)


def build_kit(out: Path = DEFAULT_OUT, root: Path = ROOT) -> Path:
    from kit_lessons import KitNotebooks

    readme = README.format(repository=repository_line(repository_url(root)))
    # The book's notebooks as the book shows them, in JupyterLab (tools/kit_lessons.py).
    notebooks = KitNotebooks(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as archive:
        _add(archive, "README.md", readme.encode())
        for rel in kit_files(root):
            data = notebooks.rewrite(rel, (root / rel).read_bytes())
            _refuse_solutions(rel, data)
            _add(archive, RENAMED.get(rel.as_posix(), rel.as_posix()), data)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="the zip to write"
    )
    out = build_kit(parser.parse_args(argv).out)
    print(f"Course kit: {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
