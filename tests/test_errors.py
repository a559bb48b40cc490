"""One error family: every exception class attnlab defines is an :class:`attnlab.Error`
(every warning an :class:`attnlab.AttnlabWarning`), found by walking every module of the
package; the server's, the widget's and the attribution functions' refusals are one class,
:class:`attnlab.Refused`; ``docs/site/errors.md`` lists every class."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import subprocess
import sys
import types
from collections.abc import Iterable
from pathlib import Path

import pytest

import attnlab
from limits import CHILD_S

ROOT = Path(__file__).resolve().parent.parent
ERRORS_PAGE = ROOT / "docs" / "site" / "errors.md"

#: Classes not yet in the family, with why; remove an entry once it is (a test fails when
#: a listed class already conforms, or no longer exists).


def package_modules() -> tuple[list[types.ModuleType], dict[str, str]]:
    """Every importable module of attnlab (entry-point ``__main__`` modules left out: they
    run the program), and the ones that fail to import here (optional dependencies)."""
    mods, failed = [attnlab], {}
    names = [m.name for m in pkgutil.walk_packages(attnlab.__path__, "attnlab.",
                                                   onerror=lambda name: None)]
    for name in names:
        if name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            mods.append(importlib.import_module(name))
        except Exception as exc:  # an optional dependency missing: skipped, and reported
            failed[name] = f"{type(exc).__name__}: {exc}"
    return mods, failed


def defined_classes(modules: Iterable[types.ModuleType]) -> dict[str, type]:
    """``module.qualname`` -> class, for every exception or warning class the modules
    define (their ``__module__`` is attnlab's), aliases counted once."""
    out = {}
    for mod in modules:
        for value in list(vars(mod).values()):
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__.split(".")[0] == "attnlab"):
                out[f"{value.__module__}.{value.__qualname__}"] = value
    return out


def outside_family(classes: Iterable[type]) -> list[str]:
    """The classes that are not in attnlab's family: a warning not an
    :class:`attnlab.AttnlabWarning`, any other exception not an :class:`attnlab.Error`."""
    bad = []
    for cls in classes:
        base = attnlab.AttnlabWarning if issubclass(cls, Warning) else attnlab.Error
        if not issubclass(cls, base):
            bases = ", ".join(b.__name__ for b in cls.__bases__)
            bad.append(f"{cls.__module__}.{cls.__qualname__}({bases}) is not a "
                       f"{base.__module__}.{base.__name__}")
    return bad


@pytest.fixture(scope="module")
def classes() -> dict[str, type]:
    modules, failed = package_modules()
    if failed:
        print("\nmodules not imported here:", failed)
    return defined_classes(modules)


def test_the_walk_finds_the_classes(classes):
    """The walk sees the known classes in every layer (else the next test proves nothing)."""
    for name in ("attnlab.Error", "attnlab.Refused", "attnlab.AttnlabWarning",
                 "attnlab._io.FolderBusyError", "attnlab._cli.UsageError",
                 "attnlab._proc.IsolatedCallError", "attnlab.tracing.budget.MemoryBudgetError",
                 "attnlab.models.registry.ModelNotAvailableError",
                 "attnlab.analysis.survey.TextsCutWarning"):
        assert name in classes, name
    assert len(classes) >= 17


def test_every_exception_is_an_attnlab_error(classes):
    assert outside_family(classes.values()) == []


def test_the_check_fails_on_a_class_outside_the_family():
    """The wrong variants: a plain ValueError subclass, a plain warning, and a class planted
    in a fake module under the attnlab namespace are each caught by the same check."""

    class Bad(ValueError):
        pass

    class BadWarning(UserWarning):
        pass

    class Good(attnlab.Error):
        pass

    class GoodWarning(attnlab.AttnlabWarning):
        pass

    assert outside_family([Good, GoodWarning]) == []
    bad = outside_family([Bad, Good, BadWarning, GoodWarning])
    assert len(bad) == 2 and "Bad(ValueError) is not a attnlab.Error" in bad[0]
    assert "BadWarning(UserWarning) is not a attnlab.AttnlabWarning" in bad[1]

    fake = types.ModuleType("attnlab._planted_errors")
    exec("class Planted(RuntimeError):\n    pass\n", vars(fake))
    found = defined_classes([fake])
    assert list(found) == ["attnlab._planted_errors.Planted"]
    assert outside_family(found.values()) == [
        "attnlab._planted_errors.Planted(RuntimeError) is not a attnlab.Error"]


def test_former_bases_still_catch():
    """``except ValueError`` / ``except RuntimeError`` written before the family still work."""
    from attnlab._cli import UsageError
    from attnlab._proc import IsolatedCallError
    from attnlab.report._speech import SpeechUnavailableError
    from attnlab.tracing.budget import MemoryBudgetError

    assert issubclass(attnlab.Error, ValueError)
    assert issubclass(attnlab.AttnlabWarning, UserWarning)
    assert issubclass(MemoryBudgetError, ValueError) and issubclass(UsageError, Exception)
    for cls in (IsolatedCallError, SpeechUnavailableError):
        assert issubclass(cls, RuntimeError) and issubclass(cls, attnlab.Error)
    with pytest.raises(RuntimeError, match="echo failed in its own process: it broke"):
        raise IsolatedCallError("echo", "it broke")


def test_one_refusal_class_with_status_and_message():
    from attnlab.viz import api, attribution_payload

    assert api.RequestError is attnlab.Refused
    assert attribution_payload.AttributionError is attnlab.Refused
    exc = attnlab.Refused(413, "body is over 10 bytes")
    assert (exc.status, exc.message, str(exc)) == (413, "body is over 10 bytes",
                                                   "body is over 10 bytes")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is attnlab.Refused and (back.status, back.message) == (413, exc.message)
    pytest.importorskip("starlette")
    from attnlab.serve import _common

    assert _common.Refused is attnlab.Refused


def test_except_attnlab_error_catches_real_refusals():
    from attnlab.tracing.budget import ModelShape, check_trace_budget

    shape = ModelShape(num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, hidden_size=32,
                       ff_size=128, vocab_size=100)
    with pytest.raises(attnlab.Error, match="memory"):
        check_trace_budget(shape, 10_000, "1MB")
    try:
        attnlab.models.load("no-such-model")
    except attnlab.Error as exc:
        assert isinstance(exc, attnlab.models.ModelNotAvailableError)
        assert "neither a known model name" in str(exc)
    else:
        pytest.fail("load('no-such-model') did not refuse")


def test_viz_refusals_are_one_class_with_their_status():
    """A bad request and an attribution function's refusal (409: no v) reach the page's
    dispatcher as the same class, each with its own status."""
    import torch

    from attnlab.tracing.attention import AttentionTrace
    from attnlab.viz.api import answer

    w = torch.softmax(torch.randn(1, 2, 4, 4), -1)
    t = AttentionTrace(tokens=list("abcd"), weights=w)
    with pytest.raises(attnlab.Error) as bad:
        answer(t, "rows", {"layer": 5, "head": 0, "queries": 1})
    assert type(bad.value) is attnlab.Refused and bad.value.status == 422
    assert bad.value.message == "layer must be in [0, 1), got 5"
    with pytest.raises(attnlab.Refused) as lacks:
        answer(t, "attribution/rows", {"kind": "value", "layer": 0, "head": 0, "rows": "1"})
    assert lacks.value.status == 409


def test_the_errors_page_lists_every_class(classes):
    page = ERRORS_PAGE.read_text(encoding="utf-8")
    missing = [name for name in classes if f"`{name}`" not in page]
    assert missing == [], f"add to {ERRORS_PAGE.relative_to(ROOT)}: {missing}"


def test_the_public_names_load_no_torch():
    code = ("import sys, attnlab; attnlab.Error, attnlab.Refused, attnlab.AttnlabWarning; "
            "print('torch' in sys.modules, attnlab.Refused.__module__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=CHILD_S)
    assert r.stdout.split() == ["False", "attnlab"], r.stderr
