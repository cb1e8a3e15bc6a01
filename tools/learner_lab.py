"""JupyterLab as a learner needs it: no news pop-up, no nbgrader instructor tools.

Run once after installing the requirements (``make env`` and the course kit's
set-up do)::

    python tools/learner_lab.py  # learner: news off, instructor tools hidden
    python tools/learner_lab.py --instructor  # instructor: nbgrader's tools back

Both settings go to JupyterLab's application settings folder of this environment
(``<venv>/share/jupyter/lab/settings``), so they hold for every JupyterLab started from
it and touch nothing in the learner's own ``~/.jupyter``:

- ``overrides.json``: the defaults of settings. The news question ("get notified about
  official Jupyter news?") covers the first notebook a learner opens and would fetch
  from the network.
- ``page_config.json``: ``disabledExtensions``. nbgrader's JupyterLab extension brings
  the instructor's tools (Create Assignment, Formgrader, the Nbgrader menu, Validate):
  a learner only needs the Assignments list, which stays.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NEWS_SETTING = "@jupyterlab/apputils-extension:notification"
INSTRUCTOR_PLUGINS = [
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:menu",
    "@jupyter/nbgrader:validate-assignment",
]


def default_settings_dir() -> Path:
    # JupyterLab's default app_settings_dir: <sys.prefix>/share/jupyter/lab/settings.
    return Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings"


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def set_news(settings_dir: Path, fetch_news: bool) -> None:
    """Merge into overrides.json, keeping any other defaults already there."""
    path = settings_dir / "overrides.json"
    overrides = _read(path)
    overrides.setdefault(NEWS_SETTING, {})["fetchNews"] = (
        "true" if fetch_news else "false"
    )
    _write(path, overrides)


def set_instructor_tools(settings_dir: Path, shown: bool) -> None:
    """Add or remove nbgrader's instructor plugins in page_config.json's
    disabledExtensions."""
    path = settings_dir / "page_config.json"
    config = _read(path)
    disabled = config.get("disabledExtensions", [])
    # JupyterLab accepts a list or a {name: true} mapping here.
    if isinstance(disabled, dict):
        disabled = [name for name, off in disabled.items() if off]
    disabled = [name for name in disabled if name not in INSTRUCTOR_PLUGINS]
    if not shown:
        disabled += INSTRUCTOR_PLUGINS
    config["disabledExtensions"] = disabled
    _write(path, config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--instructor",
        action="store_true",
        help="show nbgrader's instructor tools again (the news question stays off)",
    )
    parser.add_argument(
        "--settings-dir",
        type=Path,
        default=default_settings_dir(),
        help="JupyterLab's app settings folder (default: this environment's)",
    )
    args = parser.parse_args(argv)
    set_news(args.settings_dir, fetch_news=False)
    set_instructor_tools(args.settings_dir, shown=args.instructor)
    who = "instructor" if args.instructor else "learner"
    print(f"JupyterLab set up for the {who} in {args.settings_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
