"""The report's inputs made here: a sentence and its translation, a word-level tokenizer
over their words (so that traces are labelled with words), and a drawing with structure.

>>> len(VOCAB), VOCAB[:4]
(31, ['<pad>', '<s>', '</s>', '<unk>'])
"""

from __future__ import annotations

from typing import Any

__all__ = ["SOURCE", "SPEECH_TARGET", "TARGET", "VOCAB", "draw_image", "word_tokenizer"]

SOURCE = "the cat sat on the mat because it was tired"
TARGET = "die katze saß auf der matte weil sie müde war"
SPEECH_TARGET = "a tone rising from low to high"
#: the word-level vocabulary of the tokenizer made here (ids in this order)
VOCAB = ("<pad> <s> </s> <unk> " + SOURCE + " " + TARGET + " " + SPEECH_TARGET).split()


def word_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` over :data:`VOCAB`, splitting on whitespace (no special
    tokens added), so that the traces are labelled with words.

    >>> tok = word_tokenizer()
    >>> tok("the cat sat")["input_ids"], tok.convert_ids_to_tokens([5])
    ([4, 5, 6], ['cat'])
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for w in VOCAB:
        vocab.setdefault(w, len(vocab))
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")


def draw_image(size: int = 96) -> Any:
    """A picture with structure (a PIL RGB image, ``size`` × ``size``): vertical stripes
    across the top, a red disc at the lower right, a green triangle at the lower left.

    >>> im = draw_image(48)
    >>> im.size, im.getpixel((47, 47)) != im.getpixel((0, 0))
    ((48, 48), True)
    """
    from PIL import Image, ImageDraw

    s = size / 96
    img = Image.new("RGB", (size, size), (250, 245, 230))
    d = ImageDraw.Draw(img)
    for x in range(0, 96, 12):
        d.rectangle([x * s, 0, (x + 5) * s, 40 * s], fill=(40, 90, 200))
    d.ellipse([50 * s, 50 * s, 90 * s, 90 * s], fill=(220, 60, 40))
    d.polygon([(5 * s, 90 * s), (27 * s, 50 * s), (46 * s, 90 * s)], fill=(40, 160, 70))
    return img
