"""nova's CPU list syntax (``0-3,^2,5``), read from flavors and images alike."""

from __future__ import annotations

from typing import Any


def parse_cpu_spec(text: Any) -> set[int]:
    """The CPUs a list such as ``0-3,^2,5`` names: ranges, exclusions, singles.

    As nova's ``hardware.parse_cpu_spec``: items separated by commas (empty
    ones skipped), a ``^`` excluding a CPU or range from the rest.
    ValueError saying which item is wrong.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a CPU list")
    included: set[int] = set()
    excluded: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        target = included
        if item.startswith("^"):
            target, item = excluded, item[1:].strip()
        low, dash, high = item.partition("-")
        try:
            start = int(low)
            end = int(high) if dash else start
        except ValueError:
            raise ValueError(f"{text!r} is not a CPU list (bad item {item!r})") from None
        if start < 0 or end < start:
            raise ValueError(f"{text!r} is not a CPU list (bad range {item!r})")
        target.update(range(start, end + 1))
    return included - excluded
