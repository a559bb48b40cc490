"""A Hugging Face model folder without tokenizer files is traced from token ids, labelled by
the ids: no sentencepiece error, no made-up empty tokenizer giving '' labels."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

import attnlab.tracing.support as support  # noqa: E402
from attnlab.models import load  # noqa: E402
from attnlab.tracing import trace  # noqa: E402
from attnlab.tracing.decode import id_labels as _id_labels  # noqa: E402


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_folder_without_a_tokenizer_is_traced_from_ids(tmp_path, family):
    # llama: AutoTokenizer would fail for want of sentencepiece files; gpt2: it would make
    # an empty tokenizer whose every label is ''
    folder = tmp_path / family
    support.tiny_model(family).save_pretrained(folder)
    assert not any(p.name.startswith("tokenizer") for p in folder.iterdir())
    loaded = load(folder, reuse=False, progress=False)
    assert loaded.tokenizer is None and loaded.causal
    ids = [5, 17, 3, 42, 8]
    t = trace(loaded, ids)
    assert t.tokens == ["5", "17", "3", "42", "8"] and t.token_ids == ids
    assert t.num_layers == 2 and t.causal
    with pytest.raises(ValueError, match=f"text needs a tokenizer and {family} has none"):
        trace(loaded, "some text")


def test_ids_a_tokenizer_does_not_know_are_labelled_by_the_id():
    class Sparse:  # knows id 1 only, as an empty made-up vocabulary would know none
        def convert_ids_to_tokens(self, ids):
            return ["a" if i == 1 else None for i in ids]

        def decode(self, ids):
            return "a" if ids == [1] else ""

    assert _id_labels(Sparse(), [1, 7, 1]) == ["a", "7", "a"]
    empty = type("Empty", (Sparse,), {"convert_ids_to_tokens": lambda self, ids: [""] * len(ids)})
    assert _id_labels(empty(), [4, 2]) == ["4", "2"]
