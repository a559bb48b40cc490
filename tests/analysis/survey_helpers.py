"""A tiny deterministic causal model with a word tokenizer, and a survey entry point for
subprocesses (killed and resumed, or launched by torchrun):

    python tests/analysis/survey_helpers.py CORPUS OUT BATCH_SIZE CHECKPOINT_EVERY

No transformers import: the subprocess starts in a few seconds.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch

WORDS = ("the cat sat on a mat it was tired dog ran far away and then came back home to "
         "sleep under warm sun").split()


class WordTokenizer:
    """Whitespace words -> ids; id 0 is ``<bos>``, prepended by :meth:`encode`."""

    bos_token_id = 0
    pad_token_id = 0
    all_special_ids = [0]

    def __init__(self) -> None:
        self.vocab = ["<bos>", *WORDS]
        self.ids = {w: i for i, w in enumerate(self.vocab)}

    def encode(self, text: str) -> list[int]:
        return [0] + [self.ids[w] for w in text.split()]

    def decode_tokens(self, ids: list[int]) -> list[str]:
        return [self.vocab[i] for i in ids]


def tiny_gpt(seed: int = 0, block_size: int = 96):
    """A LoadedModel around a random-weight attnlab GPT (2 layers x 2 heads)."""
    from attnlab.models.registry import LoadedModel
    from attnlab.nn.transformer import GPT, GPTConfig
    from attnlab.tracing.adapters.attnlab import describe_model

    torch.manual_seed(seed)
    tok = WordTokenizer()
    gpt = GPT(GPTConfig(vocab_size=len(tok.vocab), block_size=block_size, num_layers=2,
                        num_heads=2, embed_dim=16)).eval()
    return LoadedModel(name="tiny-gpt", kind="attnlab", model=gpt, tokenizer=tok,
                       **describe_model(gpt))


def tiny_hf(folder: Path, kind: str = "llama", seed: int = 0) -> Path:
    """A Hugging Face model folder with random weights (2 layers x 4 heads; ``"llama"``:
    causal, 2 key/value heads; ``"bert"``: bidirectional) and a word tokenizer whose BOS
    is ``<s>``."""
    import transformers as tf
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", "<s>", *WORDS])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = tf.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", unk_token="<unk>",
                                     pad_token="<pad>")
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    common = dict(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    if kind == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **common))
    else:
        model = tf.BertModel(tf.BertConfig(**common))
    model.save_pretrained(folder)
    return folder


def write_corpus(path: Path, n: int, seed: int = 0, lo: int = 1, hi: int = 80) -> Path:
    """``n`` random lines of WORDS, lengths in [lo, hi] words."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) for _ in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    from attnlab.analysis.survey import Corpus, SurveyConfig, survey

    corpus, out, batch, every = argv[0], argv[1], int(argv[2]), int(argv[3])
    survey(tiny_gpt(), Corpus(corpus), out,
           config=SurveyConfig(batch_size=batch, checkpoint_every=every, probes=False),
           device="cpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
