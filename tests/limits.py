"""How long a test waits for something that may hang: the one place for every such limit.

The suite must pass on a busy machine (CI runs it on 2 cores with 2 workers, load 3 and
more), where a child process can take 4-5 times as long as on a quiet one. So no limit
here is a measurement: each one only stops a child, a server or a page that hangs, far
above what the slowest loaded run needs, and below CI's 90 minutes overall (each at most
15 minutes). A test asserts on what happened, never on how long it took.

Use these names (``from limits import CHILD_S``), never a number, for a ``timeout=`` of
``subprocess.run``/``Popen.wait``/``call_isolated``, a polling loop's deadline, an HTTP
request to a local server, an ``Event.wait``/``Thread.join`` and a Playwright wait (the
``page`` fixture sets :data:`PAGE_MS` as its default, so a page call needs no timeout).
A deliberately tiny timeout that tests the timeout path itself is the one exception.
"""

from __future__ import annotations

#: A child process that does real work: compiles the C++ kernel (about 45 s on a quiet
#: machine), builds or installs a package, trains, loads a pretrained model, runs under
#: torchrun, traces thousands of tokens, builds the site, runs one notebook cell.
SLOW_CHILD_S = 900

#: Anything smaller that may still hang: a child that starts Python (and torch) and does
#: a little, a server's start-up, a process's exit once told to stop, one request to a
#: local server, a thread's or an event's wait.
CHILD_S = 300

#: A browser's wait: launching chromium, a page load, a selector or function to appear.
PAGE_S = 300
PAGE_MS = PAGE_S * 1000  # Playwright counts milliseconds
