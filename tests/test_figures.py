"""Figures are real PNGs for one and several targets, and each names the cells behind it."""

import json
import runpy
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from slotbench import figures
from slotbench.cells import cell_label

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ARMS = [1, 2, 4]
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def synthetic_cells(targets=("embedded",), runs=("run1", "run2"), reps=3) -> pd.DataFrame:
    """Cells with rotated arm order, serial faster per user and slower in aggregate."""
    rows = []
    base = {1: (47.0, 47.0, 0.3), 2: (51.0, 22.0, 0.5), 4: (65.0, 16.0, 0.9)}
    t0 = 1_700_000_000.0
    for ti, target in enumerate(targets):
        for ri, run in enumerate(runs):
            for rep in range(reps):
                order = ARMS[rep % len(ARMS) :] + ARMS[: rep % len(ARMS)]
                for position, arm in enumerate(order):
                    agg, user, ttft = base[arm]
                    wiggle = 1 + 0.01 * (rep - 1) + 0.02 * ti
                    tokens = 800
                    agg_tps = agg * wiggle
                    t_start = ri * 3600 + rep * 60 + position * 20
                    rows.append(
                        {
                            "target": target,
                            "run": run,
                            "rep": rep,
                            "arm": arm,
                            "position": position,
                            "n_requests": 4,
                            "tokens_out": tokens,
                            "wall_s": tokens / agg_tps,
                            "agg_tps": agg_tps,
                            "user_tps": user * wiggle,
                            "ttft_s": ttft / wiggle,
                            "t_start_s": float(rep * 60 + position * 20),
                            "t_start_unix": t0 + t_start,
                            "raw_file": f"results/raw/{target}/{run}/rep{rep}.json",
                            "raw_sha256": f"{target}-{run}-{rep}".encode().hex().ljust(64, "0"),
                        }
                    )
    return pd.DataFrame(rows)


def synthetic_ratios(cells: pd.DataFrame) -> pd.DataFrame:
    serial = cells[cells["arm"] == 1].set_index(["target", "run", "rep"])
    keys = pd.MultiIndex.from_frame(cells[["target", "run", "rep"]])
    s = serial.reindex(keys)
    out = cells.copy()
    out["speedup"] = cells["agg_tps"].to_numpy() / s["agg_tps"].to_numpy()
    out["efficiency"] = out["speedup"] / cells["arm"]
    out["user_ratio"] = cells["user_tps"].to_numpy() / s["user_tps"].to_numpy()
    out["ttft_ratio"] = cells["ttft_s"].to_numpy() / s["ttft_s"].to_numpy()
    out["gen_gain"] = out["user_ratio"] * cells["arm"]
    out["pipelining"] = out["speedup"] / out["gen_gain"]
    return out


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("targets", [("embedded",), ("embedded", "ollama")])
def test_make_all_writes_pngs_and_sources(tmp_path, targets):
    cells = synthetic_cells(targets)
    ratios = synthetic_ratios(cells)
    sources = figures.make_all(cells, ratios, tmp_path)

    assert set(sources) == set(figures.FIGURE_IDS)
    expected_cells = sorted(
        {
            cell_label(t, r, rep, a)
            for t, r, rep, a in cells[["target", "run", "rep", "arm"]].itertuples(index=False)
        }
    )
    assert len(expected_cells) == len(targets) * 2 * 3 * 3
    for fig_id, src in sources.items():
        path = tmp_path / src["file"]
        assert src["file"] == f"{fig_id}.png"
        width, height = png_size(path)
        assert width > 300 and height > 200
        assert path.stat().st_size < 400_000, "figures should stay small"
        assert src["title"] and src["caption"]
        assert sorted(src["cells"]) == expected_cells
        assert src["raw_sha256"] == sorted(cells["raw_sha256"].unique())
    json.dumps(sources)  # must be serialisable for the sources file


def test_facets_grow_with_targets(tmp_path):
    one = synthetic_cells(("a",))
    two = synthetic_cells(("a", "b"))
    s1 = figures.make_all(one, synthetic_ratios(one), tmp_path / "one")
    s2 = figures.make_all(two, synthetic_ratios(two), tmp_path / "two")
    w1, _ = png_size(tmp_path / "one" / s1["throughput"]["file"])
    w2, _ = png_size(tmp_path / "two" / s2["throughput"]["file"])
    assert w2 > 1.5 * w1


def test_sources_follow_the_frame_each_figure_uses(tmp_path):
    cells = synthetic_cells(("embedded",))
    ratios = synthetic_ratios(cells[cells["rep"] < 2])
    sources = figures.make_all(cells, ratios, tmp_path)
    assert "embedded/run1/rep2/arm4" in sources["throughput"]["cells"]
    assert "embedded/run1/rep2/arm4" not in sources["decomposition"]["cells"]
    # serial cells are the denominators of the ratios, so they are sources too
    assert "embedded/run1/rep0/arm1" in sources["decomposition"]["cells"]
    assert len(sources["decomposition"]["raw_sha256"]) == 4


def test_file_names_can_be_overridden(tmp_path):
    cells = synthetic_cells()
    sources = figures.make_all(
        cells, synthetic_ratios(cells), tmp_path, files={"ttft": "fig_ttft.png"}
    )
    assert sources["ttft"]["file"] == "fig_ttft.png"
    png_size(tmp_path / "fig_ttft.png")


def test_png_bytes_are_reproducible(tmp_path):
    cells = synthetic_cells()
    ratios = synthetic_ratios(cells)
    figures.make_all(cells, ratios, tmp_path / "a")
    figures.make_all(cells, ratios, tmp_path / "b")
    for fig_id in figures.FIGURE_IDS:
        assert (tmp_path / "a" / f"{fig_id}.png").read_bytes() == (
            tmp_path / "b" / f"{fig_id}.png"
        ).read_bytes()


def test_entry_point(tmp_path):
    cells = synthetic_cells(("embedded", "ollama"))
    cells.to_parquet(tmp_path / "cells.parquet")
    synthetic_ratios(cells).to_parquet(tmp_path / "ratios.parquet")
    figdir = tmp_path / "figures"
    output = SimpleNamespace(
        sources=str(tmp_path / "figures.json"),
        **{fid: str(figdir / f"{fid}.png") for fid in figures.FIGURE_IDS},
    )
    snakemake = SimpleNamespace(
        input=SimpleNamespace(
            cells=str(tmp_path / "cells.parquet"), ratios=str(tmp_path / "ratios.parquet")
        ),
        output=output,
    )
    runpy.run_path(str(SCRIPTS / "figures.py"))["main"](snakemake)
    sources = json.loads((tmp_path / "figures.json").read_text())
    assert set(sources) == set(figures.FIGURE_IDS)
    for fid in figures.FIGURE_IDS:
        png_size(figdir / f"{fid}.png")
        assert np.isin(["ollama/run2/rep2/arm4"], sources[fid]["cells"]).all()
