"""How a model is run for a trace: where (``device``), in what precision (``dtype``), on
what text (``chat``: the user's text inside the tokenizer's own chat template) and for how
long (``generate``: the model's own continuation, greedy unless sampling is asked for).

:class:`RunSettings` is the one typed record of these choices that the tracer, the commands
and the trace's ``meta`` share; :func:`resolve_device` and :func:`resolve_dtype` turn what a
user wrote into torch's objects, refusing in one line what this machine cannot run
(``--device cuda`` without CUDA, a dtype whose matrix product the device lacks).

>>> s = RunSettings(generate=8, temperature=0.7, seed=1)
>>> s.sampling, s.describe()["sampling"]
(True, {'temperature': 0.7, 'top_p': None, 'seed': 1})
>>> RunSettings(generate=-1)
Traceback (most recent call last):
...
attnlab.ArgumentError: generate must be an int >= 0, got -1
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import torch
from torch import nn

from attnlab._errors import check_int, check_optional_int

__all__ = ["DEVICES", "DTYPES", "GenerationSettings", "RunSettings", "Sampling", "chat_text",
           "model_device", "model_dtype", "resolve_device", "resolve_dtype"]

#: The dtypes a model can be traced in, by the names the commands take.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: The devices the commands name (``auto``: CUDA, else MPS, else the CPU).
DEVICES = ("auto", "cpu", "cuda", "mps")


class Sampling(TypedDict):
    """The knobs of a sampled generation (a knob not given is None)."""

    temperature: float | None
    top_p: float | None
    seed: int | None


class GenerationSettings(TypedDict):
    """What a trace's ``meta["generation"]`` records of how the model generated
    (:meth:`RunSettings.describe`)."""

    #: The new tokens asked for (``generate``).
    new_tokens: int
    #: The sampling knobs, or ``"greedy"``.
    sampling: Sampling | Literal["greedy"]


@dataclass(frozen=True)
class RunSettings:
    """How the model runs: ``chat`` wraps the text as a user turn in the tokenizer's chat
    template; ``generate`` new tokens are appended by the model itself (greedy, or sampled
    when ``temperature`` or ``top_p`` is given, reproducibly with ``seed``); ``dtype`` and
    ``device`` place the model (None: as it is)."""

    chat: bool = False
    generate: int = 0
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    dtype: str | None = None
    device: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.chat, bool):
            raise TypeError(f"chat must be a bool, got {type(self.chat).__name__}")
        check_int("generate", self.generate)
        if self.temperature is not None:
            t = self.temperature
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not (
                    math.isfinite(t) and t > 0):
                raise ValueError(f"temperature must be a number > 0, got {t!r}")
        if self.top_p is not None:
            p = self.top_p
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
                raise ValueError(f"top_p must be a number in (0, 1], got {p!r}")
        check_optional_int("seed", self.seed, minimum=None)
        if not self.generate and (self.sampling or self.seed is not None):
            raise ValueError("temperature, top_p and seed shape a generation: give "
                             "generate=N (--generate N) too")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")

    @property
    def sampling(self) -> bool:
        """Whether the generation samples (``temperature`` or ``top_p`` given)."""
        return self.temperature is not None or self.top_p is not None

    def describe(self) -> GenerationSettings:
        """JSON-ready: what a trace's ``meta["generation"]`` records of the sampling."""
        return {"new_tokens": self.generate,
                "sampling": ({"temperature": self.temperature, "top_p": self.top_p,
                              "seed": self.seed} if self.sampling else "greedy")}


def resolve_device(device: str | torch.device | None) -> torch.device | None:
    """``device`` as a ``torch.device`` (None stays None: the model stays where it is);
    ``"auto"`` is CUDA, else MPS, else the CPU. A device this machine lacks is refused in
    one line naming it.

    >>> resolve_device("cpu"), resolve_device(None)
    (device(type='cpu'), None)
    """
    if device is None:
        return None
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        name = device.strip().lower()
        if name == "auto":
            if torch.cuda.is_available():
                return torch.device("cuda")
            mps = getattr(torch.backends, "mps", None)
            if mps is not None and mps.is_available():
                return torch.device("mps")
            return torch.device("cpu")
        try:
            dev = torch.device(name)
        except RuntimeError:
            raise ValueError(f"device must be one of {', '.join(DEVICES)} (or e.g. cuda:1), "
                             f"got {device!r}") from None
    else:
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        built = "built without CUDA" if torch.version.cuda is None else "no GPU visible"
        raise ValueError(f"device: {dev} was asked for but this machine has no CUDA device "
                         f"(torch {torch.__version__}, {built}); use --device cpu or auto")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device: {dev} was asked for but this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"device: {dev} was asked for but MPS (Apple GPUs) is not "
                             "available on this machine; use --device cpu or auto")
    if dev.type not in ("cpu", "cuda", "mps", "meta"):
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device | None = None
                  ) -> torch.dtype | None:
    """``dtype`` as a ``torch.dtype`` (None stays None: the model keeps its own), after a
    tiny matrix product and softmax in it on ``device`` (default the CPU): a dtype the
    device cannot run is refused in one line naming both."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype}")
        dt = dtype
    elif isinstance(dtype, str) and dtype.strip().lower() in DTYPES:
        dt = DTYPES[dtype.strip().lower()]
    else:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    dev = device if device is not None else torch.device("cpu")
    if dev.type != "meta":
        try:
            a = torch.ones(2, 2, dtype=dt, device=dev)
            torch.softmax(a @ a, dim=-1, dtype=torch.float32)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"dtype: {_name(dt)} is not supported on {dev} by torch "
                             f"{torch.__version__} ({exc}); use --dtype float32") from None
    return dt


def _name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def model_dtype(model: nn.Module) -> torch.dtype:
    """The dtype of the model's first floating parameter (float32 when it has none)."""
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (the CPU when it has none)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def chat_text(tokenizer: Any, text: str, name: str) -> str:
    """``text`` as one user turn in the tokenizer's own chat template, with the prompt for
    the assistant's answer (what a chat model is trained to read). A tokenizer without a
    template is refused, naming the model."""
    template = getattr(tokenizer, "chat_template", None)
    if not template or not hasattr(tokenizer, "apply_chat_template"):
        raise ValueError(f"chat: {name} has no chat template (its tokenizer defines none); "
                         "trace the text as it is, without --chat")
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                         add_generation_prompt=True)
