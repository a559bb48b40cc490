"""attnlab._proc: one named function in a fresh process, JSON in and out."""

from __future__ import annotations

import pytest

from attnlab._proc import IsolatedCallError, call_isolated, peak_rss_bytes


def test_the_call_runs_in_a_child_that_gets_the_environment_given():
    assert call_isolated("attnlab._proc:echo", value={"a": [1, 2.5]}) == {"a": [1, 2.5]}
    assert call_isolated("attnlab._proc:peak_rss_bytes") > 0
    with pytest.raises(IsolatedCallError, match="exit status"):  # the child saw it
        call_isolated("attnlab._proc:echo", value=1, env={"PYTHONHASHSEED": "not a seed"})
    with pytest.raises(ValueError, match="attnlab.module:function"):
        call_isolated("os:getpid")  # only attnlab's own functions


def test_failures_and_timeouts_are_isolated_call_errors():
    with pytest.raises(IsolatedCallError, match="echo failed in its own process: exit "
                       "status 1: TypeError") as info:
        call_isolated("attnlab._proc:echo", wrong=1)
    assert info.value.reason.startswith("exit status 1: TypeError")
    with pytest.raises(IsolatedCallError, match="stopped after the 0 s timeout"):
        call_isolated("attnlab._proc:echo", value=1, timeout=0.01)


def test_peak_rss_is_in_bytes():
    before = peak_rss_bytes()
    block = bytearray(64 << 20)
    block[::4096] = b"x" * len(range(0, len(block), 4096))  # touch every page: resident
    assert peak_rss_bytes() >= max(before, 64 << 20)
