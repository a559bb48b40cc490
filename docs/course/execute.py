"""Run the course notebooks in one Jupyter kernel and keep their outputs (figures, tables,
the explorer) in executed copies, for the reference site.

The notebooks are committed without outputs (``docs/course/build.py`` writes them so);
``tests/course`` runs every one of them in a kernel of this environment, and the site shows
them with the outputs of such a run. Both use this module: the tests write each notebook
they have run into the cache below, and ``make docs`` (``docs/site/hooks.py``) runs only
the notebooks the cache does not hold for the current notebook and the current attnlab,
so a ``make test`` followed by ``make docs`` runs the course once.

    python docs/course/execute.py            # fill the cache (build/course-executed)

A copy is current when its key matches: the SHA-256 of the notebook's text, of attnlab's
sources (``src/attnlab``) and of this file. One kernel runs them all, each from
``%reset -f`` (an empty namespace, no open figure): starting Python and importing torch
once per notebook would double the time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / "build" / "course-executed"
KEY = "attnlab_execution_key"  # in the executed copy's notebook metadata
RESET = "import matplotlib.pyplot as _plt\n_plt.close('all')\n%reset -f"
# two threads: the docs build and the tests run on two shared cores
ENV = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1",
       "TRANSFORMERS_OFFLINE": "1"}
TIMEOUT_S = 300


def _sources_digest(root: Path = ROOT) -> str:
    h = hashlib.sha256()
    for path in sorted((root / "src" / "attnlab").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def execution_key(notebook_text: str, sources_digest: str | None = None) -> str:
    """The key an executed copy of a notebook carries: its text, attnlab's sources, this
    runner."""
    digest = sources_digest or _sources_digest()
    return hashlib.sha256((digest + "\0" + notebook_text).encode()).hexdigest()


def cached_path(notebook: Path, cache: Path = CACHE) -> Path:
    """Where the executed copy of ``docs/course/<lang>/<name>.ipynb`` is kept."""
    return cache / notebook.parent.name / notebook.name


def current(notebook: Path, cache: Path = CACHE, sources_digest: str | None = None) -> bool:
    """Whether the cache holds an executed copy of ``notebook`` for its text and attnlab's
    sources as they are now."""
    copy = cached_path(notebook, cache)
    try:
        meta = json.loads(copy.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError):
        return False
    key = execution_key(notebook.read_text(encoding="utf-8"), sources_digest)
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
                yield client
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
    """Run a notebook's code cells in order from an empty namespace, as the notebook ships;
    a copy of the notebook with their outputs, and the seconds they took.

    The exercises ship blank (their answers are ``...``), so each exercise's check cell
    (tagged ``check``) fails: it must fail with an AssertionError, whose message is then
    its output (what a reader sees before answering), and the run goes on. Any other error,
    in any cell, raises nbclient's ``CellExecutionError``. The copy shows the notebook as
    a reader gets it, without the reference answers (``tests/course`` runs those).
    """
    from nbclient.exceptions import CellExecutionError

    run_cell(client, RESET)
    out = json.loads(json.dumps(nb))
    t0 = time.perf_counter()
    for n, cell in enumerate((c for c in out["cells"] if c["cell_type"] == "code"), 1):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if "check" in cell.get("metadata", {}).get("tags", ()):
            try:
                ran = run_cell(client, source)
            except CellExecutionError as e:
                if e.ename != "AssertionError":
                    raise
                ran = client.nb.cells[-1]  # the check refused the blank answer, as it must
            else:
                raise RuntimeError(f"cell {n}: an exercise's check passed on the blank "
                                   "answer (it must fail until the answer is filled in)")
        else:
            ran = run_cell(client, source)
        cell["outputs"] = [dict(o) for o in json.loads(json.dumps(ran.outputs))]
        cell["execution_count"] = n
    return out, time.perf_counter() - t0


def store(notebook: Path, executed: dict, cache: Path = CACHE,
          sources_digest: str | None = None) -> Path:
    """Write the executed copy of ``notebook`` into the cache, with its key."""
    executed = {**executed, "metadata": {
        **executed.get("metadata", {}),
        KEY: execution_key(notebook.read_text(encoding="utf-8"), sources_digest)}}
    copy = cached_path(notebook, cache)
    copy.parent.mkdir(parents=True, exist_ok=True)
    tmp = copy.with_suffix(".tmp")
    tmp.write_text(json.dumps(executed, ensure_ascii=False), encoding="utf-8")
    tmp.replace(copy)
    return copy


def ensure(notebooks: Iterable[Path], cache: Path = CACHE, log=print) -> dict[Path, Path]:
    """The executed copy of every notebook, running (in one kernel) those the cache does
    not hold current."""
    notebooks = list(notebooks)
    digest = _sources_digest()
    stale = [p for p in notebooks if not current(p, cache, digest)]
    if stale:
        t0 = time.perf_counter()
        with kernel() as client:
            for path in stale:
                nb = json.loads(path.read_text(encoding="utf-8"))
                executed, seconds = execute(client, nb)
                store(path, executed, cache, digest)
                log(f"executed {path.parent.name}/{path.name} in {seconds:.1f} s")
        log(f"executed {len(stale)} of {len(notebooks)} course notebooks in "
            f"{time.perf_counter() - t0:.1f} s (the others were current in {cache})")
    return {p: cached_path(p, cache) for p in notebooks}


def course_notebooks(course: Path = HERE) -> list[Path]:
    return sorted(p for lang in ("en", "zh") for p in (course / lang).glob("*.ipynb"))


if __name__ == "__main__":
    ensure(course_notebooks())
