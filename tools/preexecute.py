"""Execute the book's notebooks in parallel into myst-nb's execution cache, before the
build.

``jupyter-book build`` (``execute_notebooks: cache``) executes every notebook that is
not in the cache one after the other, in its own process. This tool runs first, in
``make book``: it finds the notebooks the build would execute (every ``.ipynb`` listed
in ``_toc.yml`` that the ``execute.exclude_patterns`` do not exclude), and executes
those that are not cached yet, ``--jobs`` at a time, into the same jupyter-cache
(``_build/.jupyter_cache``), the way myst-nb does it
(``myst_nb/core/execute/cache.py``): the notebook read with
``nbformat.reads(..., as_version=4)``, jupyter-cache's ``single_nb_execution`` in the
notebook's own folder, with the book's timeout and ``allow_errors``, its kernel (the
notebook's kernelspec) and this process's environment (so run it with the same
environment as the build: ``make book`` does), then ``add_nb_to_project`` and
``cache_notebook_bundle`` keyed by jupyter-cache's hash of the notebook. The build that
follows finds every notebook cached ("Using cached notebook") and executes nothing; its
own rules (``nb_execution_raise_on_error``, warnings as errors) still apply to whatever
it does execute.

A notebook that fails is not cached: its error is printed (the failing cell and its
traceback, as the build shows it) and the tool exits with status 1, after the other
notebooks have finished (and were cached). Anything this tool does not handle the way
myst-nb would (a ``cache`` path or execution settings given per notebook,
``run_in_temp``, kernel aliases) is left to the build: the notebook is skipped here and
the build executes it, as before.

Order: longest first (the time the cache last recorded for the same file, else a
notebook that is not a ``lesson.ipynb`` -- the pages for longer experiments -- before
the lessons), so that the longest notebook does not start last.

Usage: python tools/preexecute.py [--jobs N] [--threads N] [--dry-run]
  --jobs N     notebooks at once (default: the CPUs this process may use)
  --threads N  set OMP_NUM_THREADS/MKL_NUM_THREADS=N for the kernels
               (default: leave unset)
Exit status: 0 when every notebook the build will execute is cached, 1 when one failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import multiprocessing
import os
import re
import sys
import time
import traceback
from pathlib import Path, PurePosixPath

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
NB_VERSION = 4  # myst_nb.core.read.NOTEBOOK_VERSION


def book_settings(root: Path) -> dict:
    """The execution settings the build will use: ``execute:`` of _config.yml, then the
    ``nb_execution_*`` keys of ``sphinx: config:`` (jupyter-book applies those last)."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")) or {}
    execute = config.get("execute") or {}
    mode = execute.get("execute_notebooks", "auto")
    settings = {
        "mode": "off" if mode is False else mode,
        "timeout": execute.get("timeout", 30),
        "allow_errors": execute.get("allow_errors", False),
        "exclude": list(execute.get("exclude_patterns", []) or []),
        "in_temp": execute.get("run_in_temp", False),
        "cache": execute.get("cache", None),
        "aliases": None,
    }
    sphinx = (config.get("sphinx") or {}).get("config") or {}
    for key, name in [
        ("nb_execution_mode", "mode"),
        ("nb_execution_timeout", "timeout"),
        ("nb_execution_allow_errors", "allow_errors"),
        ("nb_execution_excludepatterns", "exclude"),
        ("nb_execution_in_temp", "in_temp"),
        ("nb_execution_cache_path", "cache"),
        ("nb_kernel_rgx_aliases", "aliases"),
    ]:
        if key in sphinx:
            settings[name] = sphinx[key]
    return settings


def toc_files(root: Path) -> list[str]:
    """Every ``file:`` of _toc.yml (and its root), in the order of the table of
    contents."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    found.append(node[key])
            for value in node.values():
                if isinstance(value, (list, dict)):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return list(dict.fromkeys(found))


def book_notebooks(root: Path, settings: dict) -> list[Path]:
    """The .ipynb files of the table of contents that the build executes (myst-nb's
    exclusion test: ``PurePosixPath(path).match(pattern)`` on the document's path)."""
    notebooks = []
    for entry in toc_files(root):
        path = root / entry
        if path.suffix != ".ipynb":
            path = path.with_name(path.name + ".ipynb")
        if not path.is_file():
            continue
        path = path.absolute()
        if any(PurePosixPath(path.as_posix()).match(p) for p in settings["exclude"]):
            continue
        notebooks.append(path)
    return notebooks


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """As myst-nb reads a .ipynb (``myst_nb.core.read.standard_nb_read``)."""
    return nbformat.reads(path.read_text(encoding="utf-8"), as_version=NB_VERSION)


def apply_aliases(nb: nbformat.NotebookNode, aliases: dict | None) -> None:
    """myst-nb's ``nb_kernel_rgx_aliases``: the kernel name is replaced before
    hashing."""
    name = nb.metadata.get("kernelspec", {}).get("name")
    for rgx, alias in (aliases or {}).items():
        if name is not None and re.fullmatch(rgx, name):
            nb.metadata["kernelspec"]["name"] = alias
            break


def execute_one(
    path: str, timeout: int, allow_errors: bool, aliases, threads: int | None
) -> dict:
    """Worker (its own process): execute one notebook in its folder; return it as
    text."""
    from jupyter_cache.executors.utils import single_nb_execution

    if threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)
    nb = read_notebook(Path(path))
    apply_aliases(nb, aliases)
    started = time.perf_counter()
    try:
        result = single_nb_execution(
            nb,
            cwd=str(Path(path).parent),
            timeout=timeout,
            allow_errors=allow_errors,
            meta_override=True,
        )
    except (
        Exception
    ) as exc:  # a dead kernel, a missing kernel: not caught by jupyter-cache
        return {
            "path": path,
            "nb": None,
            "seconds": time.perf_counter() - started,
            "error": type(exc).__name__,
            "traceback": traceback.format_exc(),
        }
    if result.err is not None:
        return {
            "path": path,
            "nb": None,
            "seconds": result.time,
            "error": type(result.err).__name__,
            "traceback": result.exc_string,
        }
    return {
        "path": path,
        "nb": nbformat.writes(result.nb),
        "seconds": result.time,
        "error": None,
        "traceback": None,
    }


def estimate(cache, path: Path) -> float:
    """Seconds this notebook is expected to take: the cache's last record for the same
    file, else a guess (pages that are not lessons hold the longer experiments, see
    CONTRIBUTING.md)."""
    seconds = [
        r.data.get("execution_seconds")
        for r in cache.list_cache_records()
        if r.uri == str(path) and r.data.get("execution_seconds")
    ]
    if seconds:
        return float(seconds[-1])
    return 30.0 if path.name == "lesson.ipynb" else 60.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    root = args.root.absolute()

    settings = book_settings(root)
    if settings["mode"] != "cache":
        print(
            f"preexecute: execute_notebooks is {settings['mode']!r}, not 'cache': "
            "nothing to do"
        )
        return 0
    if settings["in_temp"]:
        print("preexecute: run_in_temp is set: left to the build")
        return 0
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    # myst_nb.sphinx_ext: the build's cache is <build folder>/.jupyter_cache, unless
    # configured.
    cache_path = (
        Path(settings["cache"])
        if settings["cache"]
        else root / "_build" / ".jupyter_cache"
    )
    cache = get_cache(
        str(cache_path if cache_path.is_absolute() else root / cache_path)
    )

    pending: list[Path] = []
    cached = 0
    for path in book_notebooks(root, settings):
        nb = read_notebook(path)
        if any(k.startswith("execution") for k in (nb.metadata.get("mystnb") or {})):
            print(
                f"preexecute: {path.relative_to(root)} sets its own execution options: "
                "left to the build"
            )
            continue
        apply_aliases(nb, settings["aliases"])
        try:
            cache.match_cache_notebook(nb)
            cached += 1
        except KeyError:
            pending.append(path)
    pending.sort(key=lambda p: -estimate(cache, p))
    jobs = max(1, min(args.jobs, len(pending)))
    print(
        f"preexecute: {cached} notebook(s) already cached, {len(pending)} to execute"
        + (f", {jobs} at a time" if pending else "")
        + (
            f", OMP_NUM_THREADS={args.threads}"
            if pending and args.threads is not None
            else ""
        ),
        flush=True,
    )
    if args.dry_run or not pending:
        for path in pending:
            print(f"  {path.relative_to(root)}")
        return 0

    failed = []
    started = time.perf_counter()
    # spawn: the workers start clean (no copy of this process's database connection).
    context = multiprocessing.get_context("spawn")
    with futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        running = [
            pool.submit(
                execute_one,
                str(p),
                settings["timeout"],
                settings["allow_errors"],
                settings["aliases"],
                args.threads,
            )
            for p in pending
        ]
        for done in futures.as_completed(running):
            result = done.result()
            path = Path(result["path"])
            name = path.relative_to(root)
            if result["error"]:
                failed.append(name)
                print(
                    f"preexecute: {name}: Executing notebook failed: {result['error']} "
                    f"(after {result['seconds']:.1f} s)\n{result['traceback']}",
                    flush=True,
                )
                continue
            # As myst-nb does after executing a notebook itself.
            record = cache.add_nb_to_project(str(path))
            cache.cache_notebook_bundle(
                CacheBundleIn(
                    nbformat.reads(result["nb"], as_version=NB_VERSION),
                    record.uri,
                    data={"execution_seconds": result["seconds"]},
                ),
                check_validity=False,
                overwrite=True,
            )
            print(
                f"preexecute: {name}: executed in {result['seconds']:.1f} s", flush=True
            )
    wall = time.perf_counter() - started
    print(
        f"preexecute: {len(pending) - len(failed)} of {len(pending)} executed and "
        f"cached in {wall:.1f} s wall-clock",
        flush=True,
    )
    if failed:
        print("preexecute: FAILED: " + ", ".join(map(str, failed)), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
