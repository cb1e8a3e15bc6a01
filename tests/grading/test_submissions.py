"""Every layout an instructor meets is found, read only, with each learner's time.

Bug (issue 31): pointed at nbgrader's own ``submitted/`` folder, the class command
deleted every learner's notebook before reading it, and stamped every submission with
the time it graded it, so that on-time learners were graded late. Cause: the class
command used the course's ``submitted/`` as its working folder, and wrote its own
clock into ``timestamp.txt``. Guard: :mod:`tformer_grading.submissions` only reads,
and returns the time the learner handed in; these tests hash every layout before and
after, and read its times. (tests/grading/test_classgrade.py grades each layout.)
"""

import datetime as dt
import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from tformer_grading.course import GradeError
from tformer_grading.submissions import (
    MAX_CLASS_ZIP,
    MAX_LEARNER_ZIP,
    MAX_ZIP_MEMBERS,
    find,
    unzip,
)

A = "ch01_shapes"
NB = b'{"cells": [], "nbformat": 4, "metadata": {}}'
ON_TIME = "2026-11-29 10:00:00.000000 UTC"


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: its kind, bytes (or link target) and times."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root)):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            if os.path.islink(path):
                body = os.readlink(path)
            elif os.path.isfile(path):
                body = hashlib.sha256(Path(os.fsdecode(path)).read_bytes()).digest()
            else:
                body = b""
            out[path] = (info.st_mode, body, info.st_mtime_ns)
    return out


def put(path: Path, data: bytes = NB, when: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if when:
        (path.parent / "timestamp.txt").write_text(when)
    return path


def found(root: Path, scratch: Path) -> dict[bytes, object]:
    before = tree(root) if root.is_dir() else root.read_bytes()
    hand_ins = find(root, A, scratch)
    after = tree(root) if root.is_dir() else root.read_bytes()
    assert after == before, "find() changed the submissions"
    return {h.name: h for h in hand_ins}


def test_a_folder_per_learner(tmp_path):
    put(tmp_path / "in" / "ann" / "exercise.ipynb")
    put(tmp_path / "in" / "ben" / "exercise.ipynb", when=ON_TIME)
    (tmp_path / "in" / "cid").mkdir()
    (tmp_path / "in" / ".ipynb_checkpoints").mkdir()
    got = found(tmp_path / "in", tmp_path / "scratch")
    assert set(got) == {b"ann", b"ben", b"cid"}
    assert got[b"ann"].notebook == tmp_path / "in" / "ann" / "exercise.ipynb"
    assert got[b"ann"].time_from == "file time"
    assert got[b"ben"].time_from == "timestamp.txt"
    assert got[b"ben"].handed_in == dt.datetime(2026, 11, 29, 10)
    assert got[b"cid"].problem == "no exercise.ipynb in the submission"


def test_nbgraders_submitted_folder(tmp_path):
    root = tmp_path / "course" / "submitted"
    put(root / "ann" / A / "exercise.ipynb", when=ON_TIME)
    put(root / "ann" / "ch02_attention" / "exercise.ipynb")
    put(root / "ben" / A / "exercise.ipynb", when="2026-12-02 09:30:00.5 UTC")
    got = found(root, tmp_path / "scratch")
    assert set(got) == {b"ann", b"ben"}
    assert got[b"ann"].notebook == root / "ann" / A / "exercise.ipynb"
    assert got[b"ben"].handed_in == dt.datetime(2026, 12, 2, 9, 30, 0, 500000)


def test_the_exchange_inbound_folder_gives_each_learners_newest(tmp_path):
    root = tmp_path / "inbound"
    old = f"ann+{A}+2026-11-28 08:00:00.000000 UTC"
    new = f"ann+{A}+2026-11-29 10:00:00.000000 UTC+Zm9vYmFyYmF6"
    put(root / old / "exercise.ipynb", b"old", when="2026-11-28 08:00:00.000000 UTC")
    put(root / new / "exercise.ipynb", b"new", when=ON_TIME)
    put(root / "ann+ch02_attention+2026-11-30 10:00:00 UTC" / "exercise.ipynb")
    put(root / f"b+en+{A}+2026-11-29 10:00:00 UTC+xyz" / "exercise.ipynb")
    got = found(root, tmp_path / "scratch")
    assert set(got) == {b"ann", b"b+en"}
    assert got[b"ann"].notebook.read_bytes() == b"new"
    assert got[b"ann"].handed_in == dt.datetime(2026, 11, 29, 10)


def test_an_lms_download_of_files_and_of_folders(tmp_path):
    root = tmp_path / "lms"
    put(root / "smithjane_12345_67890_exercise.ipynb")
    put(root / "doejohn_LATE_222_333_Exercise-1.ipynb")
    put(root / "roe_9_my_answers.ipynb")
    put(root / "grades.csv", b"a,b")
    put(root / "Ann Lee_77_assignsubmission_file_" / "ann_exercise.ipynb")
    got = found(root, tmp_path / "scratch")
    assert set(got) == {
        b"smithjane_12345_67890",
        b"doejohn_LATE_222_333",
        b"roe_9_my_answers",
        b"Ann Lee_77_assignsubmission_file_",
    }
    moodle = got[b"Ann Lee_77_assignsubmission_file_"]
    assert moodle.notebook.name == "ann_exercise.ipynb"
    assert moodle.notes == [
        "graded ann_exercise.ipynb (the submission has no exercise.ipynb)"
    ]


def zipped(path: Path, members: dict[str, bytes], when=(2026, 11, 29, 11, 0, 0)):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=when), data)
    return path


def test_a_whole_class_zip_is_read_without_unpacking_it_there(tmp_path):
    archive = zipped(
        tmp_path / "class.zip",
        {
            "submissions/ann/exercise.ipynb": b"ann",
            "submissions/ann/notes.txt": b"not unpacked",
            "submissions/ben/ch01_shapes/exercise.ipynb": b"ben",
            "submissions/ben/ch01_shapes/timestamp.txt": ON_TIME.encode(),
        },
    )
    got = found(archive, tmp_path / "scratch")
    assert set(got) == {b"ann", b"ben"}
    assert got[b"ann"].notebook.read_bytes() == b"ann"
    assert got[b"ann"].time_from == "file time"
    local = dt.datetime(2026, 11, 29, 11).astimezone(dt.timezone.utc)
    assert got[b"ann"].handed_in == local.replace(tzinfo=None)
    assert got[b"ben"].handed_in == dt.datetime(2026, 11, 29, 10)
    assert list(tmp_path.iterdir()) and not (tmp_path / "submissions").exists()
    assert not list((tmp_path / "scratch").rglob("notes.txt"))


def test_one_zip_per_learner(tmp_path):
    root = tmp_path / "zips"
    root.mkdir()
    zipped(root / "ann.zip", {"ann/exercise.ipynb": b"ann"})
    zipped(root / "ben.zip", {"exercise.ipynb": b"ben"}, when=(1980, 1, 1, 0, 0, 0))
    (root / "cid.zip").write_bytes(b"not a zip")
    got = found(root, tmp_path / "scratch")
    assert got[b"ann"].notebook.read_bytes() == b"ann"
    assert got[b"ben"].notebook.read_bytes() == b"ben"
    assert got[b"ben"].time_from == "unknown" and got[b"ben"].handed_in is None
    assert got[b"cid"].problem.startswith("cid.zip: not a readable zip")


def test_a_zip_writes_nothing_outside_its_scratch_folder(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../escaped.ipynb", b"x")
        zf.writestr("/tmp/absolute.ipynb", b"x")
        zf.writestr("ann/../../up.ipynb", b"x")
        link = zipfile.ZipInfo("ann/exercise.ipynb")
        link.external_attr = 0o120777 << 16  # a symbolic link to the solutions
        zf.writestr(link, "/course/solutions/ch01_shapes/exercise.ipynb")
        zf.writestr("ben/exercise.ipynb", b"x" * (21 << 20))
    scratch = tmp_path / "scratch"
    got = found(archive, scratch)
    written = {p.relative_to(scratch) for p in scratch.rglob("*") if p.is_file()}
    assert written == {Path("class/ben/exercise.ipynb")}
    assert (scratch / "class/ben/exercise.ipynb").stat().st_size == (20 << 20) + 1
    assert not (tmp_path / "escaped.ipynb").exists()
    assert set(got) == {b"ben"}  # ann's only member was a link: nothing to grade


def test_a_zip_with_too_many_members_or_bytes_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "many.zip", "w") as zf:
        for i in range(MAX_ZIP_MEMBERS + 1):
            zf.writestr(f"{i}.txt", b"")
    with pytest.raises(GradeError, match="at most 100,000 are read"):
        find(tmp_path / "many.zip", A, tmp_path / "s1")
    zipped(tmp_path / "big.zip", {"a/exercise.ipynb": b"x" * 2000})
    with pytest.raises(Exception, match="unpack to more than"):
        unzip(tmp_path / "big.zip", tmp_path / "s2", max_bytes=1000)


def test_any_name_linux_allows_is_a_learner(tmp_path):
    root = tmp_path / "in"
    names = [b"jos\xe9", b"new\nline", b"--rf", b"-x", b"two words", "😀 é".encode()]
    for name in names:
        put(Path(os.fsdecode(os.fsencode(root) + b"/" + name)) / "exercise.ipynb")
    got = found(root, tmp_path / "scratch")
    assert set(got) == set(names)
    assert len({h.id for h in got.values()}) == len(names)
    assert all(not h.problem for h in got.values())


def test_links_are_followed_only_inside_the_submissions(tmp_path):
    root, elsewhere = tmp_path / "in", tmp_path / "solutions"
    put(root / "ann" / "exercise.ipynb")
    put(elsewhere / "exercise.ipynb")
    (root / "ann_again").symlink_to("ann")
    (root / "eve").symlink_to(elsewhere)
    (root / "gone").symlink_to(tmp_path / "nothing")
    (root / "mel").mkdir()
    (root / "mel" / "exercise.ipynb").symlink_to(elsewhere / "exercise.ipynb")
    got = found(root, tmp_path / "scratch")
    assert got[b"ann_again"].notebook == root / "ann_again" / "exercise.ipynb"
    assert not got[b"ann_again"].problem
    assert "outside the submissions folder, not followed" in got[b"eve"].problem
    assert "outside the submissions folder" in got[b"gone"].problem
    # a notebook that is a link is found, and the preflight refuses it by name
    assert got[b"mel"].notebook.is_symlink()


def test_two_hand_ins_of_one_learner_are_not_guessed_between(tmp_path):
    root = tmp_path / "in"
    put(root / "ann" / "exercise.ipynb")
    put(root / "ann_exercise.ipynb")
    got = found(root, tmp_path / "scratch")
    assert set(got) == {b"ann"}
    assert got[b"ann"].problem.startswith("2 hand-ins for this learner")


def test_a_timestamp_file_nbgrader_cannot_read_falls_back_to_the_file_time(tmp_path):
    notebook = put(tmp_path / "in" / "ann" / "exercise.ipynb", when="yesterday-ish")
    os.utime(notebook, (1_764_410_400, 1_764_410_400))  # 2025-11-29 10:00 UTC
    (hand_in,) = find(tmp_path / "in", A, tmp_path / "scratch")
    assert hand_in.time_from == "file time"
    assert hand_in.handed_in == dt.datetime(2025, 11, 29, 10)
    assert "timestamp.txt holds no time nbgrader reads" in hand_in.notes[0]


def test_a_path_that_is_neither_folder_nor_zip_is_a_clear_error(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(GradeError, match="is not a folder of submissions nor a zip"):
        find(tmp_path / "notes.txt", A, tmp_path / "scratch")


def test_the_instructors_page_states_the_limits_the_code_sets():
    page = (Path(__file__).parents[2] / "book" / "instructors.md").read_text()
    page = " ".join(page.split())
    assert (
        f"at most {MAX_CLASS_ZIP >> 30} GB for a class and {MAX_LEARNER_ZIP >> 20} MB "
        "for one learner" in page
    )
