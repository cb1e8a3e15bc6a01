"""nbgrader configuration: this repository is an nbgrader course directory.

Instructors: see book/instructors.md. Solutions (with hidden tests) live in
``solutions/<chapter>/exercise.ipynb``; ``nbgrader generate_assignment <chapter>``
writes the student version to ``release/<chapter>/``, and ``make release``
copies it into ``book/<chapter>/`` where the book and learners read it.
(nbgrader replaces its whole release folder, so it must not write into book/
directly, where the lessons live.)
"""

import os

c = get_config()  # noqa: F821  (provided by nbgrader)

# This file's folder, absolute (nbgrader warns on every command about a relative root),
# wherever the course is copied or moved: traitlets sets __file__ as it loads the file.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
c.CourseDirectory.ignore = [
    ".ipynb_checkpoints",
    "*.pyc",
    "__pycache__",
    "feedback",
    "*.py",
]

# Grading: a cell that loops forever is stopped and the run goes on.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True
c.Execute.execute_retries = 0
# A deleted check cell is put back from the gradebook and run (nbgrader's default leaves it ungraded).
c.OverwriteCells.add_missing_cells = True
# Hidden tests are visible in solutions/ and stripped from the student version.
c.ClearHiddenTests.enforce_metadata = True
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Guards against hostile notebooks (book/instructors.md), from tformer_grading.guard:
# GuardedExecute replaces nbgrader's Execute. It survives a kernel crash or a loop that ignores
# interrupts (later cells score 0, the next learner is graded), caps each cell's output, and hands
# the kernel a receipt key; VerifyReceipts then zeroes a test cell whose checks did not print a
# success line signed with that key. Without tformer_grading importable here, plain nbgrader
# grades as usual, without these guards.
import importlib.util


def _package_folder(name: str) -> str:
    """Where package ``name`` is, found without importing it."""
    return importlib.util.find_spec(name).submodule_search_locations[0]


if (
    importlib.util.find_spec("tformer_grading") is not None
):  # found without importing it (and torch)
    c.Autograde.autograde_preprocessors = [
        "tformer_grading.guard.execute.GuardedExecute",
        "tformer_grading.guard.verify.VerifyReceipts",
        "nbgrader.preprocessors.IgnorePattern",
        "nbconvert.preprocessors.ClearMetadataPreprocessor",
        "nbgrader.preprocessors.LimitOutput",
        "nbgrader.preprocessors.SaveAutoGrades",
        "nbgrader.preprocessors.AssignLatePenalties",
        "nbgrader.preprocessors.CheckCellMetadata",
    ]
    c.GuardedExecute.max_output_chars = 100_000
    c.GuardedExecute.max_notebook_output_chars = 2_000_000
    c.GuardedExecute.notebook_timeout = 900  # seconds; past it a notebook is not graded
    # What the grader reads from a kernel (tformer_grading/guard/message_bound.py): past
    # either bound the kernel is stopped, and that cell and the rest score 0.
    c.BoundedKernelClient.max_message_bytes = 32 << 20
    c.BoundedKernelClient.max_notebook_bytes = 512 << 20
    # Each kernel in a bubblewrap sandbox (tformer_grading/sandbox/): "auto" uses it where it
    # can start and warns where it cannot; "required" refuses to grade without it (the class
    # command, `python -m tformer_grading --course ...`, requires it); "off" never.
    c.GuardedExecute.sandbox = "auto"
    # Feedback pages show learner text (markdown cells, HTML their code displays) as
    # text: no scripts, no event handlers (tformer_grading/guard/feedback_html.py), and
    # open with a Content-Security-Policy that runs only their own (feedback_page.py).
    c.HTMLExporter.sanitize_html = True
    # ... and are read alone, offline, by the learner (tformer_grading/feedback_page.py):
    # links to the lesson sections on the published book (or the kit's file named as
    # text), hidden tests shown as one line, no receipts, wrapped diagnoses, maths
    # rendered by a MathJax inside the page. Template folders: the course's, and
    # nbgrader's, whose feedback template the course's extends.
    c.HTMLExporter.filters = {
        "clean_html": "tformer_grading.feedback_page.page_html",
        "strip_files_prefix": "tformer_grading.feedback_page.page_markdown",
        "tformer_page_head": "tformer_grading.feedback_page.page_head",
    }
    c.GenerateFeedback.preprocessors = [
        "nbgrader.preprocessors.GetGrades",
        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
        "tformer_grading.feedback_page.LearnerFeedback",
    ]
    # nbgrader's template name (its API, which the class command uses, insists on it):
    # the course's folder of that name comes first on the path, and its page extends
    # nbgrader's index.html.j2.
    c.HTMLExporter.template_name = "feedback"
    c.HTMLExporter.template_file = "learner_page.html.j2"
    c.HTMLExporter.extra_template_basedirs = [
        os.path.join(_package_folder("tformer_grading"), "feedback_templates"),
        os.path.join(
            _package_folder("nbgrader"), "server_extensions", "formgrader", "templates"
        ),
    ]
    # The published book's address (its root): feedback links go to its lesson
    # sections. Left unset, it is html.baseurl in _config.yml; '' never links.
    # c.LearnerFeedback.book_url = "https://example.org/transformers-course"
