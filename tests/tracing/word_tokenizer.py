"""A tiny word-level Hugging Face tokenizer for encoder–decoder tests (no files, no hub):
``<s> <pad> </s> <unk>``, ``w0``…``w59`` and the letters, each text ending in ``</s>``."""

from __future__ import annotations

import warnings


def word_tokenizer():
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = ["<s>", "<pad>", "</s>", "<unk>"] + [f"w{i}" for i in range(60)] + list(
        "abcdefghijklmnopqrstuvwxyz")
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.post_processor = processors.TemplateProcessing(single="$A </s>",
                                                     special_tokens=[("</s>", 2)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.PreTrainedTokenizerFast(
            tokenizer_object=t, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
            unk_token="<unk>")
