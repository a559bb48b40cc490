"""Run the course notebooks in one Jupyter kernel and keep their outputs (figures, tables,
the explorer) in executed copies: the outputs committed with the notebooks, and the site's.

A notebook always runs as its source makes it: its cells with no output
(:func:`without_outputs`), whatever outputs its file holds. ``python docs/course/build.py
--execute`` (``make course``) runs each notebook its source makes here, then writes it with
the outputs of its executed copy (made stable and small: ``build.py``'s ``with_outputs``);
``tests/course`` runs every notebook here too, and ``make docs`` (``docs/site/hooks.py``)
renders each page from its executed copy. All of them share the cache below: a notebook
runs only when the cache holds no copy for its cells and the current attnlab, so
``make course``, ``make test`` and ``make docs`` run each notebook once between them.

    python docs/course/execute.py            # fill the cache (build/course-executed)

A copy is current when its key matches: the SHA-256 of the notebook without outputs (its
cells and metadata: :func:`source_text`), of attnlab's sources (``src/attnlab``) and of this
file. One kernel runs them all, each from ``%reset -f`` (an empty namespace, no open
figure): starting Python and importing torch once per notebook would double the time, and
the kernel keeps each experiment's result (``attnlab.course.run``, a module's variable that
``%reset -f`` leaves) and each experiment's measurement (:data:`KEEP`), so that the other
language's notebook of a part, whose code cells are the same, gets its experiments and its
measurements at once. The copy numbers its cells 1, 2, ... as a fresh
kernel would (the kernel's own count goes on from notebook to notebook), in the prompts of
its results and of its tracebacks alike.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / "build" / "course-executed"
KEY = "attnlab_execution_key"  # in the executed copy's notebook metadata
# ``%reset -f`` empties the namespace and the output cache, each followed by a full garbage
# collection: with torch, transformers and the loaded models in the kernel, two passes over
# every object it holds (about 0.25 s each, 44 per run of the course). The objects are frozen
# around it (``gc.freeze``: left out of those passes) and unfrozen after it: what the reset
# drops is freed as it is dropped, and the few cycles among it at the kernel's next
# collection. The whole course in one kernel, alone on the machine: 132-138 s -> 112-123 s.
RESET = ("import matplotlib.pyplot as _plt\n_plt.close('all')\n__import__('gc').freeze()\n"
         "%reset -f\n__import__('gc').unfreeze()")
# run once in the kernel, before the notebooks: every experiment's ``measure`` keeps its
# result for the kernel's session (``attnlab.course.keep_measures``), so that a part's second
# notebook (the other language, the same code cells) gets the measurements its cells make
# (``m = qk_variance.measure(...)``) at once, as ``run`` gets its results: the Chinese
# notebooks' ``measure`` cells 16.4 -> 0.8 s, the whole course in one kernel 142-145 s ->
# 133-138 s
KEEP = "import attnlab.course as _course\n_course.keep_measures()\ndel _course"
# two threads: the docs build and the tests run on two shared cores; waiting OpenMP threads
# sleep (OMP_WAIT_POLICY=PASSIVE) rather than spin: on shared cores a spinning thread holds
# the core its partner's share of the work waits for, and the real models' passes (parts 09
# and 11) took three to ten times as long on a busy machine (the same two threads split the
# work as before: the numbers are the same); the sliders' figures still
# (attnlab.course.STILL_ENV): no front end here moves them, and nbclient's client stalled
# for minutes on their widgets' messages on a busy machine (the tests move each slider by
# calling its drawing function)
ENV = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE",
       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ATTNLAB_COURSE_STILL": "1"}
TIMEOUT_S = 300
#: A traceback's name of a cell the kernel ran ("Cell In[127], line 3"), colours and all.
_CELL_PROMPT = re.compile(r"(Cell(?:\x1b\[[0-9;]*m|\s)*In\[)(\d+)(\])")


def _sources_digest(root: Path = ROOT) -> str:
    h = hashlib.sha256()
    for path in sorted((root / "src" / "attnlab").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def without_outputs(nb: dict) -> dict:
    """A copy of the notebook ``nb`` as its source makes it: every code cell without
    outputs and execution count, each cell's source one string, and no execution key in
    its metadata. Two notebooks with the same cells and metadata give equal copies, whatever
    outputs they hold."""
    out = json.loads(json.dumps(nb))
    out.get("metadata", {}).pop(KEY, None)
    for cell in out.get("cells", []):
        source = cell.get("source", "")
        cell["source"] = "".join(source) if isinstance(source, list) else source
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return out


def source_text(nb: dict) -> str:
    """The text an execution key is made of: the notebook without outputs
    (:func:`without_outputs`), as sorted JSON."""
    return json.dumps(without_outputs(nb), sort_keys=True, ensure_ascii=False)


def execution_key(notebook_text: str, sources_digest: str | None = None) -> str:
    """The key an executed copy of a notebook carries: the notebook without outputs
    (:func:`source_text`), attnlab's sources, this runner."""
    digest = sources_digest or _sources_digest()
    return hashlib.sha256((digest + "\0" + notebook_text).encode()).hexdigest()


def cached_path(notebook: Path, cache: Path = CACHE) -> Path:
    """Where the executed copy of ``docs/course/<lang>/<name>.ipynb`` is kept."""
    return cache / notebook.parent.name / notebook.name


def _read(notebook: Path) -> dict:
    return json.loads(notebook.read_text(encoding="utf-8"))


def current(notebook: Path, cache: Path = CACHE, sources_digest: str | None = None,
            nb: dict | None = None) -> bool:
    """Whether the cache holds an executed copy of ``notebook`` for its cells (those of
    ``nb`` when given, else those of the file; outputs aside) and attnlab's sources as they
    are now."""
    copy = cached_path(notebook, cache)
    try:
        meta = _read(copy).get("metadata", {})
    except (OSError, ValueError):
        return False
    key = execution_key(source_text(_read(notebook) if nb is None else nb), sources_digest)
    return meta.get(KEY) == key


@contextlib.contextmanager
def kernel(workdir: Path | None = None) -> Iterator:
    """One python3 kernel of this environment (its ipykernel), as an nbclient client whose
    notebook collects the cells run in it; the notebooks' working folder is ``workdir``
    (a temporary folder when None)."""
    import nbformat
    from nbclient import NotebookClient

    saved = {var: os.environ.get(var) for var in ENV}
    os.environ.update(ENV)  # the kernel inherits the environment when it starts
    try:
        with contextlib.ExitStack() as stack:
            if workdir is None:
                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            client = NotebookClient(nbformat.v4.new_notebook(), timeout=TIMEOUT_S,
                                    kernel_name="python3",
                                    resources={"metadata": {"path": str(workdir)}})
            with client.setup_kernel():
                cell = run_cell(client, "import sys; print(sys.executable)")
                found = cell.outputs[0]["text"].strip()
                if found != sys.executable:
                    raise RuntimeError("the python3 kernel must run this environment's "
                                       f"Python ({sys.executable}); it runs {found}")
                run_cell(client, KEEP)
                yield client
                # the kernel's objects frozen: its exit then does not walk them all for
                # cycles, and the client does not wait for it (1.3-2.4 s -> 0.2 s here)
                run_cell(client, "__import__('gc').freeze()")
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def run_cell(client, source: str):
    """Run one code cell in the client's kernel; the cell, with its outputs (an error in
    it raises nbclient's ``CellExecutionError``)."""
    import nbformat

    cell = nbformat.v4.new_code_cell(source)
    client.nb.cells.append(cell)
    client.execute_cell(cell, len(client.nb.cells) - 1)
    return cell


def execute(client, nb: dict) -> tuple[dict, float]:
    """Run a notebook's code cells in order from an empty namespace, as its source makes it
    (outputs it holds are left out: :func:`without_outputs`); a copy of the notebook with
    their outputs, and the seconds they took.

    The exercises ship blank (their answers are ``...``), so each exercise's check cell
    (tagged ``check``) fails: it must fail with an AssertionError, whose message is then
    its output (what a reader sees before answering), and the run goes on. Any other error,
    in any cell, raises nbclient's ``CellExecutionError``. The copy shows the notebook as
    a reader gets it, without the reference answers (``tests/course`` runs those). Its code
    cells are numbered 1, 2, ... in order, and so are the prompts its results and
    tracebacks name (the kernel's count, shared by the notebooks it runs, is not kept).
    """
    from nbclient.exceptions import CellExecutionError

    run_cell(client, RESET)
    out = without_outputs(nb)
    numbers: dict[int, int] = {}  # the kernel's count of a cell -> its number here
    t0 = time.perf_counter()
    for n, cell in enumerate((c for c in out["cells"] if c["cell_type"] == "code"), 1):
        if "check" in cell.get("metadata", {}).get("tags", ()):
            try:
                ran = run_cell(client, cell["source"])
            except CellExecutionError as e:
                if e.ename != "AssertionError":
                    raise
                ran = client.nb.cells[-1]  # the check refused the blank answer, as it must
            else:
                raise RuntimeError(f"cell {n}: an exercise's check passed on the blank "
                                   "answer (it must fail until the answer is filled in)")
        else:
            ran = run_cell(client, cell["source"])
        if isinstance(ran.get("execution_count"), int):
            numbers[ran["execution_count"]] = n
        cell["outputs"] = [_numbered(dict(o), n, numbers)
                           for o in json.loads(json.dumps(ran.outputs))]
        cell["execution_count"] = n
    return out, time.perf_counter() - t0


def _numbered(output: dict, n: int, numbers: Mapping[int, int]) -> dict:
    """An output of the ``n``-th code cell, its prompts numbered as in the notebook: a
    result's count is ``n``; a traceback's ``Cell In[k]`` is the number of the cell the
    kernel counted ``k`` (a cell of another run keeps the kernel's count)."""
    if output.get("output_type") == "execute_result":
        output["execution_count"] = n
    elif output.get("output_type") == "error":
        def number(m: re.Match) -> str:
            k = int(m.group(2))
            return m.group(1) + str(numbers.get(k, k)) + m.group(3)

        output["traceback"] = [_CELL_PROMPT.sub(number, line)
                               for line in output.get("traceback", [])]
    return output


def store(notebook: Path, executed: dict, cache: Path = CACHE,
          sources_digest: str | None = None) -> Path:
    """Write the executed copy of ``notebook`` into the cache, with the key of the cells
    it ran (its own cells, outputs aside)."""
    executed = {**executed, "metadata": {
        **executed.get("metadata", {}),
        KEY: execution_key(source_text(executed), sources_digest)}}
    copy = cached_path(notebook, cache)
    copy.parent.mkdir(parents=True, exist_ok=True)
    tmp = copy.with_suffix(".tmp")
    tmp.write_text(json.dumps(executed, ensure_ascii=False), encoding="utf-8")
    tmp.replace(copy)
    return copy


def ensure(notebooks: Iterable[Path] | Mapping[Path, dict], cache: Path = CACHE,
           log=print) -> dict[Path, Path]:
    """The executed copy of every notebook, running (in one kernel) those the cache does
    not hold current.

    ``notebooks``: the notebooks' files, each run as its cells are in the file (its
    outputs left out), or a mapping of each file to the notebook to run for it (what
    ``build.py`` makes from the source, before it writes the file).
    """
    given = (dict(notebooks) if isinstance(notebooks, Mapping)
             else dict.fromkeys(notebooks, None))
    digest = _sources_digest()
    stale = [p for p, nb in given.items() if not current(p, cache, digest, nb)]
    if stale:
        t0 = time.perf_counter()
        with kernel() as client:
            for path in stale:
                nb = given[path]
                executed, seconds = execute(client, _read(path) if nb is None else nb)
                store(path, executed, cache, digest)
                log(f"executed {path.parent.name}/{path.name} in {seconds:.1f} s")
        log(f"executed {len(stale)} of {len(given)} course notebooks in "
            f"{time.perf_counter() - t0:.1f} s (the others were current in {cache})")
    return {p: cached_path(p, cache) for p in given}


def course_notebooks(course: Path = HERE) -> list[Path]:
    return sorted(p for lang in ("en", "zh") for p in (course / lang).glob("*.ipynb"))


if __name__ == "__main__":
    ensure(course_notebooks())
