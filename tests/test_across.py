"""Across targets: one table of every target at the widest arm they share, ordered by speedup,
naming the neighbours that differ beyond their intervals."""

from __future__ import annotations

import pandas as pd
import pytest

import synthetic as syn
from slotbench.provenance import cellsets

pytestmark = pytest.mark.slow  # three targets' synthetic runs rendered: 1-3 s each


def requests_of(**slots):
    return pd.concat([syn.make_requests(target=t, reps=6, slots=n) for t, n in slots.items()],
                     ignore_index=True)


def test_targets_are_ordered_by_speedup_and_separated_by_their_intervals():
    md, page, record, data = syn.rendered(requests_of(one=1, four=4, two=2))
    section = md[md.index("## Across targets"):md.index("## Figures")]
    rows = [line.split("|")[1].strip() for line in section.splitlines()
            if line.startswith("| ") and not line.startswith(("| target", "| ---"))]
    assert rows == ["four", "two", "one"], rows
    summary = data.summary.set_index(["target", "arm"])
    assert summary.loc[("four", 4), "speedup"] > summary.loc[("one", 4), "speedup"]
    assert "speedup: four and two; two and one differ beyond their intervals" in section
    assert "Across targets" in page
    # every cell behind the table: the 4-way and serial cells of the three targets
    assert len(cellsets.expand(record)["entries"]["across"]["cells"]) == 3 * 6 * 2
    assert record["entries"]["across"]["n_cells"] == 3 * 6 * 2


def test_one_target_has_no_cross_target_section():
    md, *_ = syn.rendered(requests_of(only=4))
    assert "## Across targets" not in md
