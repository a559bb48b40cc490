"""Lists each course notebook's run time, and their total, after the tests."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    times = [(r.nodeid.rsplit("[", 1)[-1].rstrip("]"), seconds)
             for r in terminalreporter.stats.get("passed", [])
             for name, seconds in getattr(r, "user_properties", ())
             if name == "notebook_seconds"]
    if not times:
        return
    terminalreporter.write_sep("-", "course notebooks: run time (kernel already started)")
    for name, seconds in times:
        terminalreporter.write_line(f"{name}: {seconds:.1f} s")
    terminalreporter.write_line(f"total: {sum(s for _, s in times):.1f} s over {len(times)} "
                                f"notebooks")
