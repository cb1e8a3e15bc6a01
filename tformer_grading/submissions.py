"""Find a class's hand-ins in whatever layout they came, without writing a byte there.

``find(root, assignment, scratch)`` reads ``root`` (the class command's
``--submissions``) and returns one :class:`HandIn` per learner. Layouts read:

- a folder per learner, ``<student>/exercise.ipynb`` (an upload, an e-mail box, a
  Moodle download's ``<name>_<id>_assignsubmission_file_/`` folders);
- nbgrader's ``submitted/`` after ``nbgrader collect``,
  ``<student>/<assignment>/exercise.ipynb`` beside its ``timestamp.txt``;
- nbgrader's exchange inbound folder, ``<student>+<assignment>+<time>[+<random>]/``:
  each learner's newest hand-in of this assignment;
- notebooks side by side as an LMS names them, ``<name>_<id>_exercise.ipynb`` (the
  learner is the name without ``_exercise...``);
- a zip of any of these (``--submissions class.zip``), or one ``<student>.zip`` per
  learner: only their notebooks and ``timestamp.txt`` files are unpacked, into
  ``scratch``, never beside the zip.

A learner's name is whatever bytes the layout gives (:mod:`learner_text` turns it into
a safe gradebook id). Names starting with ``.`` are not learners (``.git``,
``.ipynb_checkpoints``). Links: a learner's folder that is a symbolic link is
followed only when it points inside ``root`` (a link unpacked from an archive could
point at the course's solutions); inside a learner's folder nothing that is a link
is followed, and a notebook that is a link is not graded (the preflight says so).

The time a learner handed in, in this order: the ``timestamp.txt`` beside the
notebook (nbgrader's, written at ``nbgrader submit``); else the notebook's
modification time (a zip member's recorded time, read as this machine's local
time); else unknown, and said so.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .course import NOTEBOOK, GradeError
from .learner_text import student_id

TIMESTAMP = "timestamp.txt"
# Bytes unpacked from one learner's zip, and from a whole class's.
MAX_LEARNER_ZIP = 100 << 20
MAX_CLASS_ZIP = 2 << 30
MAX_ZIP_MEMBERS = 100_000
# A file time before this is no time at all (a zip's 1980-01-01 default, or 0).
_NO_TIME = dt.datetime(1981, 1, 1).timestamp()  # noqa: DTZ001 - local, as zips keep it
_LMS_TAIL = re.compile(rb"_+exercise(?:[-_ ]?\(?\d+\)?)?$", re.IGNORECASE)


@dataclass
class HandIn:
    """One learner's submission as found: where its notebook is, and when it came."""

    name: bytes  # the learner's folder, file or member name, as given
    notebook: Path | None = None  # None when ``problem`` says why there is none
    handed_in: dt.datetime | None = None  # UTC, without tzinfo (as nbgrader keeps it)
    time_from: str = "unknown"  # "timestamp.txt", "file time" or "unknown"
    problem: str = ""  # why it cannot be graded; "" when it can
    notes: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return student_id(self.name)


def find(root: Path, assignment: str, scratch: Path) -> list[HandIn]:
    """Every learner's hand-in under ``root`` (a folder or a zip), sorted by id.

    Zips are unpacked into ``scratch``, a private folder the caller owns. Raises
    :class:`GradeError` when ``root`` is neither a folder nor a readable zip."""
    if root.is_file():
        try:
            top = unzip(root, scratch / "class", MAX_CLASS_ZIP)
        except NotAZip as exc:
            raise GradeError(f"{root} is not a folder of submissions nor a zip: {exc}")
        return _in_folder(_single_top_folder(top, assignment), assignment, scratch)
    if not root.is_dir():
        raise GradeError(f"{root} is not a folder of submissions (nor a zip of them)")
    return _in_folder(root, assignment, scratch)


def _in_folder(root: Path, assignment: str, scratch: Path) -> list[HandIn]:
    found: list[HandIn] = []
    newest: dict[bytes, tuple[dt.datetime, HandIn]] = {}
    with os.scandir(os.fsencode(root)) as entries:
        listed = sorted(entries, key=lambda e: e.name)
    for entry in listed:
        name = entry.name
        if name.startswith(b"."):
            continue
        path = Path(os.fsdecode(entry.path))
        if entry.is_symlink() and not _inside(path, root):
            found.append(HandIn(name, problem=_OUTSIDE_LINK))
            continue
        if entry.is_symlink() and not path.exists():
            found.append(HandIn(name, problem="a symbolic link to nothing"))
            continue
        if path.is_dir():
            inbound = _inbound(name)
            if inbound is None:
                found.append(_from_folder(name, path, assignment))
            elif inbound[1] == assignment.encode():
                learner, _, when = inbound
                hand_in = _from_folder(learner, path, assignment)
                if learner not in newest or when > newest[learner][0]:
                    newest[learner] = (when, hand_in)
        elif path.is_file() and name.lower().endswith(b".zip"):
            found.append(_from_zip(name[:-4], path, assignment, scratch))
        elif path.is_file() and name.lower().endswith(b".ipynb"):
            learner = _LMS_TAIL.sub(b"", name[:-6]) or name[:-6]
            found.append(_with_time(HandIn(learner, notebook=path), path.parent))
    found += [hand_in for _, hand_in in newest.values()]
    return _one_per_learner(found)


_OUTSIDE_LINK = (
    "a symbolic link to a place outside the submissions folder, not followed (a link "
    "unpacked from a learner's archive could point at the solutions): copy it in"
)


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a loop of links
        return False


def _inbound(name: bytes) -> tuple[bytes, bytes, dt.datetime] | None:
    """(learner, assignment, time) of an exchange inbound folder's name, or None."""
    for splits in (3, 2):
        parts = name.rsplit(b"+", splits)
        if len(parts) == splits + 1 and parts[0] and parts[1]:
            when = _parse_time(parts[2])
            if when is not None:
                return parts[0], parts[1], when
    return None


def _parse_time(text: bytes) -> dt.datetime | None:
    from nbgrader.utils import parse_utc

    try:
        when = parse_utc(text.decode("ascii").strip())
    except (ValueError, OverflowError, UnicodeDecodeError, TypeError):
        return None
    return when if isinstance(when, dt.datetime) else None


def _from_folder(name: bytes, folder: Path, assignment: str) -> HandIn:
    nested = folder / assignment
    place = nested if _real_dir(nested) else folder
    notebook = place / f"{NOTEBOOK}.ipynb"
    hand_in = HandIn(name, notebook=notebook)
    if not (notebook.is_symlink() or notebook.exists()):
        others = sorted(p for p in place.glob("*.ipynb") if _real_file(p))
        if len(others) == 1:
            hand_in.notebook = others[0]
            hand_in.notes.append(
                f"graded {others[0].name} (the submission has no {NOTEBOOK}.ipynb)"
            )
        else:
            several = f" ({len(others)} other notebooks)" if others else ""
            return HandIn(
                name, problem=f"no {NOTEBOOK}.ipynb in the submission{several}"
            )
    return _with_time(hand_in, place)


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _real_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _with_time(hand_in: HandIn, folder: Path) -> HandIn:
    stamp = folder / TIMESTAMP
    if _real_file(stamp):
        with open(stamp, "rb") as f:
            text = f.read(200)
        when = _parse_time(text)
        if when is not None:
            hand_in.handed_in, hand_in.time_from = when, TIMESTAMP
            return hand_in
        hand_in.notes.append(
            f"{TIMESTAMP} holds no time nbgrader reads ({text[:60]!r}): the "
            "notebook's file time was taken"
        )
    try:
        mtime = os.lstat(hand_in.notebook).st_mtime
    except OSError:
        return hand_in
    if mtime >= _NO_TIME:
        hand_in.handed_in = dt.datetime.fromtimestamp(mtime, dt.timezone.utc).replace(
            tzinfo=None
        )
        hand_in.time_from = "file time"
    return hand_in


def _from_zip(name: bytes, archive: Path, assignment: str, scratch: Path) -> HandIn:
    try:
        folder = unzip(archive, scratch / student_id(name), MAX_LEARNER_ZIP)
    except NotAZip as exc:
        return HandIn(name, problem=f"{os.fsdecode(archive.name)}: {exc}")
    while not _holds_a_hand_in(folder, assignment):
        inside = [p for p in folder.iterdir() if p.is_dir()]
        if len(inside) != 1:
            break
        folder = inside[0]  # the zip was made of the learner's folder
    return _from_folder(name, folder, assignment)


def _holds_a_hand_in(folder: Path, assignment: str) -> bool:
    return (folder / f"{NOTEBOOK}.ipynb").exists() or (folder / assignment).is_dir()


def _single_top_folder(top: Path, assignment: str) -> Path:
    """The folder a zip's content starts in: a zip made of one folder holds its
    learners (or one learner's files) inside that folder."""
    entries = [p for p in top.iterdir() if not p.name.startswith(".")]
    if len(entries) != 1 or not entries[0].is_dir():
        return top
    inner = entries[0]
    return top if _holds_a_hand_in(inner, assignment) else inner


class NotAZip(Exception):
    """The archive cannot be read, or holds more than it may."""


def unzip(archive: Path, dest: Path, max_bytes: int) -> Path:
    """Unpack the notebooks and timestamp files of ``archive`` into ``dest``.

    Only regular members named ``*.ipynb`` or ``timestamp.txt`` are written, each at
    most 20 MB plus one byte (the preflight then reports a larger one by its size),
    under names made of the member's own path parts (no ``..``, no absolute path, no
    link ever created, so no member is written outside ``dest``). Each file keeps the
    member's recorded time. Raises :class:`NotAZip`."""
    from .preflight import MAX_BYTES

    dest.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            if len(members) > MAX_ZIP_MEMBERS:
                raise NotAZip(
                    f"it has {len(members):,} members; at most "
                    f"{MAX_ZIP_MEMBERS:,} are read"
                )
            total = 0
            for info in members:
                target = _member_path(info, dest)
                if target is None:
                    continue
                with zf.open(info) as src:
                    data = src.read(MAX_BYTES + 1)
                total += len(data)
                if total > max_bytes:
                    raise NotAZip(
                        f"its notebooks unpack to more than {max_bytes >> 20:,} MB"
                    )
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                except OSError:  # a name too long, or a file where a folder goes
                    continue
                when = _zip_time(info)
                os.utime(target, (when, when))
    except (zipfile.BadZipFile, OSError, RuntimeError, ValueError, EOFError) as exc:
        raise NotAZip(f"not a readable zip ({type(exc).__name__}: {exc})") from None
    return dest


def _member_path(info: zipfile.ZipInfo, dest: Path) -> Path | None:
    kind = stat.S_IFMT(info.external_attr >> 16)  # 0 when the zip records none
    if info.is_dir() or kind not in (0, stat.S_IFREG):
        return None  # folders are made as needed; links and devices never
    parts = PurePosixPath(info.filename.replace("\\", "/")).parts
    if not parts or parts[0] in ("/", "__MACOSX"):
        return None
    if any(part in ("", ".", "..") or "\0" in part for part in parts):
        return None
    leaf = parts[-1]
    if not (leaf.lower().endswith(".ipynb") or leaf == TIMESTAMP):
        return None
    return dest.joinpath(*parts)


def _zip_time(info: zipfile.ZipInfo) -> float:
    if info.date_time[:3] <= (1980, 1, 1):
        return 0.0  # no time recorded
    try:
        # Local time, as a zip keeps it.
        return dt.datetime(*info.date_time).timestamp()  # noqa: DTZ001 - local time
    except ValueError:
        return 0.0


def _one_per_learner(found: list[HandIn]) -> list[HandIn]:
    """Two hand-ins under one id (a folder and a loose notebook of the same learner)
    are not guessed between: the learner is reported with both."""
    by_id: dict[str, list[HandIn]] = {}
    for hand_in in found:
        by_id.setdefault(hand_in.id, []).append(hand_in)
    out = []
    for sid, group in sorted(by_id.items()):
        if len(group) > 1:
            out.append(
                HandIn(
                    group[0].name,
                    problem=f"{len(group)} hand-ins for this learner: grade one "
                    "(move the others out of the submissions folder)",
                )
            )
        else:
            out.append(group[0])
    return out
