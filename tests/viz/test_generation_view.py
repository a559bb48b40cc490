"""The explorer of a generation in a real headless Chromium: the prompt/generated boundary,
the generated tokens as chips, and ◀ ▶ stepping the query through them (each step shows
that token's row, which sees only the prompt and the tokens before it)."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.nn.transformer import GPT, GPTConfig
from attnlab.viz.explorer import Explorer

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=17, num_layers=2, num_heads=2, embed_dim=16)).eval()
    t = attnlab.trace(gpt, [1, 2, 3, 4, 5], generate=4)
    path = Explorer(t, uid="ax-gen").save(tmp_path_factory.mktemp("gen") / "gen.html")
    return t, path


def _attr(page, name):
    return page.get_attribute(".attnlab-explorer", name)


def test_a_generation_is_marked_and_stepped_token_by_token(page, generated):
    t, path = generated
    assert t.meta["prompt_tokens"] == 5 and t.meta["generated"] == [5, 6, 7, 8]
    page.goto(path.as_uri())
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    assert (_attr(page, "data-generated"), _attr(page, "data-prompt-tokens")) == ("4", "5")
    chips = page.eval_on_selector_all(".ax-gen-tok", "els => els.map(e => e.textContent)")
    assert chips == t.tokens[5:]
    assert "5 prompt tokens, then 4 generated" in page.inner_text(".ax-gen-info")
    seen = []
    for _ in range(4):
        page.click(".ax-gen-next")
        seen.append(int(_attr(page, "data-query")))
    assert seen == [5, 6, 7, 8]  # from the prompt, ▶ goes to the first generated token
    assert page.is_disabled(".ax-gen-next") and not page.is_disabled(".ax-gen-prev")
    page.click(".ax-gen-prev")
    assert _attr(page, "data-query") == "7"
    assert "generated token 3 of 4" in page.inner_text(".ax-gen-step")
    page.click(".ax-gen-tok[data-i='5']")  # a chip selects its row
    assert _attr(page, "data-query") == "5"
    page.click(".ax-lang")
    assert "提示 5 个词元，随后生成 4 个" in page.inner_text(".ax-gen-info")


def test_a_text_without_generation_shows_no_generation_bar(page, tmp_path):
    gpt = GPT(GPTConfig(vocab_size=17, num_layers=1, num_heads=2, embed_dim=8)).eval()
    path = Explorer(attnlab.trace(gpt, [1, 2, 3]), uid="ax-plain").save(tmp_path / "p.html")
    page.goto(path.as_uri())
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    assert _attr(page, "data-generated") is None
    assert page.locator(".ax-gen-tok").count() == 0
