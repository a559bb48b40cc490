"""attnlab.course.run keeps each experiment's result for the session, under the exact
arguments of the call: the same call again gets a copy at once (the second language's
notebook of a part, a cell run twice), any other argument or ``again=True`` runs anew, and
what the notebook shows is the same either way (numbers, figure, random generators)."""

from __future__ import annotations

import io
import pickle
import random
from dataclasses import dataclass

import matplotlib as mpl
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.transforms import TransformNode

import attnlab.course as course
import attnlab.experiments as experiments
from attnlab._errors import ArgumentTypeError
from attnlab.experiments import Control, Result

#: A name the registry knows (show() reads its catalog); the fake experiment stands in for it.
NAME = "masking"
#: A figure title the experiments' shared catalog translates ("训练步数").
TITLE = "training step"


@pytest.fixture(autouse=True)
def _kept(monkeypatch):
    """An empty store of kept results, the process's fonts and language left as they were."""
    monkeypatch.setattr(course, "_KEPT", {})
    with mpl.rc_context():
        yield
        course.setup("en")


class _Experiment:
    """A stand-in for ``attnlab.experiments.run``: counts its runs; each result measures
    the run's number (so that two runs differ), or one draw of torch's global generator
    with ``draws``; ``table`` goes into the result as it is."""

    def __init__(self, draws: bool = False, table=None):
        self.runs, self.draws, self.table = 0, draws, table

    def __call__(self, name, seed=0, **kwargs):
        self.runs += 1
        measured = float(torch.rand(())) if self.draws else float(self.runs)
        fig = Figure(figsize=(3, 2))
        fig.subplots().set_title(TITLE)
        return Result(name, "a claim", "论断", "the gap", "差距", measured, 0.0, 0.5,
                      control=Control("random weights", "随机权重", 3.0), table=self.table,
                      figure=fig, seconds=0.25)


@pytest.fixture
def fake(monkeypatch):
    experiment = _Experiment()
    monkeypatch.setattr(experiments, "run", experiment)
    return experiment


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def test_the_same_call_again_returns_a_copy_of_the_kept_result_without_running(fake):
    first = course.run(NAME, 3, n=4, sizes=(1, 2))
    again = course.run(NAME, seed=3, sizes=(1, 2), n=4)  # the same arguments, another order
    assert fake.runs == 1
    assert again is not first and again.figure is not first.figure
    assert again.to_json() == first.to_json() and again.seconds == first.seconds == 0.25
    assert _png(again.figure) == _png(first.figure)


@dataclass
class _Config:
    steps: int = 10
    gains: tuple = (0.1, 1.0)


def _key_problems() -> list[str]:
    """The calls of ``course.run`` that got the kept result of another call (a key that
    leaves out an argument, or confuses two values) or ran again for the same call."""
    problems = []
    fake = experiments.run
    config = _Config()
    calls = [((NAME,), {}), ((NAME, 1), {}), ((NAME,), {"n": 4}), ((NAME,), {"n": 5}),
             ((NAME,), {"n": 4.0}), ((NAME,), {"n": True}), ((NAME,), {"n": 4, "m": 1}),
             ((NAME,), {"dims": (1, 2)}), ((NAME,), {"dims": [1, 2]}),
             ((NAME,), {"x": 0.0}), ((NAME,), {"x": -0.0}), ((NAME,), {"d": {"a": 1}}),
             (("softmax-saturation",), {}), ((NAME,), {"config": config})]
    for args, kwargs in calls:
        before = fake.runs
        course.run(*args, **kwargs)
        if fake.runs != before + 1:
            problems.append(f"run{args} {kwargs}: got another call's result")
    config.steps = 20  # the same object, changed since: another run
    before = fake.runs
    course.run(NAME, config=config)
    if fake.runs != before + 1:
        problems.append("a config changed since the last call: got the old result")
    for args, kwargs in calls[:3]:  # each again: its own kept result
        before = fake.runs
        course.run(*args, **kwargs)
        if fake.runs != before:
            problems.append(f"run{args} {kwargs} again: ran again")
    return problems


def test_every_argument_is_in_the_key_by_value_and_type(fake):
    assert _key_problems() == []


def test_the_key_check_catches_a_key_without_the_keyword_arguments(fake, monkeypatch):
    monkeypatch.setattr(course, "run_key", lambda name, seed, kwargs: (name, seed))
    problems = _key_problems()
    assert "run('masking',) {'n': 4}: got another call's result" in problems
    assert "a config changed since the last call: got the old result" in problems
    monkeypatch.setattr(course, "_KEPT", {})
    monkeypatch.setattr(course, "run_key",
                        lambda name, seed, kwargs: (name, repr(sorted(kwargs.items()))))
    assert "run('masking', 1) {}: got another call's result" in _key_problems()


def test_again_measures_anew_and_keeps_the_new_result(fake):
    first = course.run(NAME, n=4)
    second = course.run(NAME, n=4, again=True)
    assert fake.runs == 2 and (first.measured, second.measured) == (1.0, 2.0)
    assert course.run(NAME, n=4).measured == 2.0 and fake.runs == 2
    with pytest.raises(ArgumentTypeError, match="again must be True or False, got 1"):
        course.run(NAME, again=1)


def test_an_argument_that_is_not_a_plain_value_runs_every_time(fake):
    for value in (print, lambda x: x, torch.zeros(2), object()):
        course.run(NAME, hook=value)
        course.run(NAME, hook=value)
    assert fake.runs == 8 and course._KEPT == {}


def test_a_result_that_cannot_be_copied_runs_every_time(monkeypatch):
    experiment = _Experiment(table=(["f"], [[lambda: 0]]))  # a lambda does not pickle
    monkeypatch.setattr(experiments, "run", experiment)
    course.run(NAME)
    course.run(NAME)
    assert experiment.runs == 2 and course._KEPT == {}


def test_show_translates_the_callers_copy_and_never_the_kept_result(fake):
    course.setup("zh")
    mine = course.run(NAME)
    course.show(mine)
    assert mine.figure.axes[0].get_title() == "训练步数"
    assert course.run(NAME).figure.axes[0].get_title() == TITLE
    course.setup("en")
    shown = course.show(course.run(NAME))
    assert shown.axes[0].get_title() == TITLE and fake.runs == 1


def _state() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()


def _same_state(a, b) -> bool:
    return torch.equal(a[0], b[0]) and a[1] == b[1] and bool((a[2] == b[2]).all())


def test_a_kept_result_leaves_the_generators_as_its_run_left_them(monkeypatch):
    """An experiment that draws from torch's global generator is kept for the state it
    started from, and its copy leaves the state the run left; from another state it runs
    anew. One that leaves the generators alone is kept whatever their state."""
    drawing = _Experiment(draws=True)
    monkeypatch.setattr(experiments, "run", drawing)
    torch.manual_seed(1)
    first = course.run(NAME)
    after = _state()
    torch.manual_seed(1)
    copy = course.run(NAME)
    assert drawing.runs == 1 and copy.measured == first.measured
    assert _same_state(_state(), after)
    torch.manual_seed(2)
    other = course.run(NAME)
    assert drawing.runs == 2 and other.measured != first.measured

    still = _Experiment()
    monkeypatch.setattr(experiments, "run", still)
    course.run("softmax-saturation")
    torch.manual_seed(5)
    random.seed(5)
    before = _state()
    course.run("softmax-saturation")
    assert still.runs == 1 and _same_state(_state(), before)


def test_a_real_experiments_copy_shows_what_a_new_run_shows_in_either_language():
    """The figure of an experiment kept from the English notebook, shown in the Chinese
    one, draws what the Chinese notebook's own run draws; its numbers are the run's."""
    course.setup("en")
    made_in_english = course.run(NAME)
    english = _png(course.show(made_in_english))
    assert _png(course.show(course.run(NAME))) == english
    course.setup("zh")
    kept = course.run(NAME)
    new = course.run(NAME, again=True)
    assert {**kept.to_json(), "seconds": 0} == {**new.to_json(), "seconds": 0}
    assert _png(course.show(kept)) == _png(course.show(new)) != english


def _transforms(fig) -> list:
    """Every matplotlib transform the figure's artists reach: their own, the nodes they
    are made of, and the parents those nodes know."""
    todo = [v for a in fig.findobj() for v in vars(a).values() if isinstance(v, TransformNode)]
    seen: dict[int, TransformNode] = {}
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        todo += [v for v in vars(node).values() if isinstance(v, TransformNode)]
        todo += [p for p in (ref() for ref in node._parents.values()) if p is not None]
    return list(seen.values())


def _misfiled_parents(fig) -> int:
    """How many of the figure's transforms' parents are filed under another object's id
    (matplotlib files each under its own: a new parent with the address of a freed one
    would replace the entry of a parent still alive, which then misses the changes)."""
    return sum(key != id(ref()) for node in _transforms(fig)
               for key, ref in node._parents.items() if ref() is not None)


def test_a_kept_figures_transforms_know_their_parents_by_the_copys_own_objects():
    """A plain pickled copy of a figure files its transforms' parents under the ids of the
    original's objects; the copy run() returns files them under its own, as matplotlib
    does for a figure it made, before and after drawing it."""
    course.setup("en")
    original = course.run(NAME).figure
    assert len(_transforms(original)) > 10 and _misfiled_parents(original) == 0
    assert _misfiled_parents(pickle.loads(pickle.dumps(original))) > 0  # the check finds it
    copy = course.run(NAME).figure
    assert _misfiled_parents(copy) == 0
    png = _png(copy)
    assert _misfiled_parents(copy) == 0 and png == _png(original)


# -- every experiment's measure, kept (the course's runner) ------------------------------------


@pytest.fixture
def kept_measures(monkeypatch):
    """keep_measures() with an empty store; every module's measure put back after, and the
    rope-relative one counting its calls (the function keep_measures wraps)."""
    import importlib

    from attnlab.experiments.registry import EXPERIMENTS

    for module_name in set(EXPERIMENTS.values()):
        module = importlib.import_module(module_name)
        if hasattr(module, "measure"):
            monkeypatch.setattr(module, "measure", module.measure)  # restored after the test
    rope = importlib.import_module("attnlab.experiments.rope_relative")
    original = rope.measure
    calls = []

    def counting(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    counting.__wrapped__ = original  # its source is the original's, as a decorator's is
    monkeypatch.setattr(rope, "measure", counting)
    monkeypatch.setattr(course, "_MEASURES", {})
    originals = course.keep_measures()
    return rope, original, calls, originals


def _equal(a, b) -> bool:
    """Equal values, field by field (dataclasses), tensor by tensor, item by item."""
    import dataclasses

    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if dataclasses.is_dataclass(a):
        return all(_equal(getattr(a, f.name), getattr(b, f.name))
                   for f in dataclasses.fields(a))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def test_each_measure_is_measured_once_per_arguments_and_copied_after(kept_measures):
    rope, original, calls, originals = kept_measures
    small = dict(head_dim=8, n_positions=8)
    first = rope.measure(**small)
    again = rope.measure(n_positions=8, head_dim=8)  # the same arguments, another order
    assert len(calls) == 1 and again is not first
    assert _equal(again, first)
    rope.measure(head_dim=8, n_positions=9)  # another value: measured
    rope.measure(1, **small)  # another seed, given by position: measured
    assert len(calls) == 3
    for _ in range(2):  # an argument that is not a plain value: measured every time
        rope.measure(rotate_fn=original.__kwdefaults__["rotate_fn"], **small)
    assert len(calls) == 5
    # the experiment's own run (which hands measure its functions: measured each time)
    verdicts = [{k: v for k, v in experiments.run("rope-relative", **small).to_json().items()
                 if k != "seconds"} for _ in range(2)]
    assert len(calls) == 7 and verdicts[0] == verdicts[1]
    assert "attnlab.experiments.rope_relative" in originals and course.keep_measures() == {}


def test_a_kept_measure_shows_the_original_code(kept_measures):
    """What show_code prints of a kept measure is the experiment's own function."""
    import importlib
    import inspect

    *_, originals = kept_measures
    saved = originals["attnlab.experiments.masking"]
    kept = importlib.import_module("attnlab.experiments.masking").measure
    assert kept is not saved and getattr(kept, "_attnlab_kept", False)
    assert inspect.getsource(kept) == inspect.getsource(saved)
    assert (kept.__module__, kept.__qualname__) == (saved.__module__, saved.__qualname__)
    assert inspect.signature(kept) == inspect.signature(saved)
