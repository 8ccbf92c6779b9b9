"""Figures are real PNGs for one and several targets, and each names the cells behind it."""

import json
import runpy
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from slotbench.core.cells import cell_label
from slotbench.figures import captions, plots as figures, openloop as figures_open, thermal as figures_thermal
from slotbench.measure import thermal

pytestmark = pytest.mark.slow  # figures drawn from synthetic runs: a second or more each

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ARMS = [1, 2, 4]
REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"


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


def synthetic_summary(ratios: pd.DataFrame) -> pd.DataFrame:
    """summary.csv's shape: medians per target and arm, intervals 5% either side."""
    out = ratios.groupby(["target", "arm"], as_index=False)[
        ["speedup", "user_ratio", "ttft_ratio", "agg_tps", "user_tps"]].median()
    for metric in ("speedup", "user_ratio", "ttft_ratio"):
        out[f"{metric}_lo"], out[f"{metric}_hi"] = out[metric] * 0.95, out[metric] * 1.05
    return out


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
    summary = synthetic_summary(ratios)
    sources = figures.make_all(cells, ratios, tmp_path, summary=summary)

    assert set(sources) == set(figures.FIGURE_IDS)
    # targets side by side: the widest shared arm and serial-1 of each, shown with two or more
    across = sources.pop("across")
    assert across["shown"] == (len(targets) >= 2)
    assert {c.rsplit("/", 1)[1] for c in across["cells"]} == {"arm1", "arm4"}
    assert {c.split("/")[0] for c in across["cells"]} == set(targets)
    # the server's batch over one rep: without telemetry, no cells behind it
    server = sources.pop("server_batch")
    assert server["cells"] == [] and server["scrapes"] == {}
    png_size(tmp_path / server["file"])
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
    thermal_samples(cells, throttle_at=(("ollama", "run2", 1),)).to_parquet(
        tmp_path / "thermal.parquet"
    )
    from slotbench.analysis import capacity

    ratios = pd.read_parquet(tmp_path / "ratios.parquet")
    from slotbench.workflow.config import resolve

    slo = resolve({"slo": {"user_tps_min": 10.0}})["slo"]
    assessed = capacity.assess(ratios, slo, 200, 0.95, 0)
    (tmp_path / "capacity.json").write_text(json.dumps(assessed))
    synthetic_summary(ratios).to_csv(tmp_path / "summary.csv", index=False)
    snakemake = SimpleNamespace(
        input=SimpleNamespace(
            cells=str(tmp_path / "cells.parquet"),
            ratios=str(tmp_path / "ratios.parquet"),
            thermal=str(tmp_path / "thermal.parquet"),
            capacity=str(tmp_path / "capacity.json"),
            summary=str(tmp_path / "summary.csv"),
        ),
        output=output,
        log=[str(tmp_path / "figures.log")],
    )
    runpy.run_path(str(SCRIPTS / "figures.py"), init_globals={"snakemake": snakemake})
    sources = json.loads((tmp_path / "figures.json").read_text())
    assert set(sources) == set(figures.FIGURE_IDS)
    for fid in figures.FIGURE_IDS:
        png_size(figdir / f"{fid}.png")
        if fid != "server_batch":  # one rep per target, and only with telemetry
            assert np.isin(["ollama/run2/rep2/arm4"], sources[fid]["cells"]).all()


# --- the timeline's thermal annotation ----------------------------------------------------------


def thermal_samples(cells, throttle_at=(), temps=True) -> pd.DataFrame:
    """1 Hz samples over every rep of the cells: two CPU clocks (and a zone's temperature);
    the CPUs report throttling from the fifth second of the (target, run, rep)s in throttle_at."""
    rows = []
    for (target, run, rep), grp in cells.groupby(["target", "run", "rep"]):
        start = float(grp["t_start_unix"].min())
        for i in range(int(grp["t_start_unix"].max() - start) + 10):
            hot = (target, run, rep) in throttle_at and i >= 5
            tags = {"target": target, "run": run, "rep": rep, "t_s": float(i),
                    "t_unix": start + i}
            if temps:
                rows.append(tags | thermal.reading("linux", "thermal_zone0/cpu",
                                                   temp_c=55.0 + 0.1 * i))
            for cpu in (0, 1):
                rows.append(tags | thermal.reading("linux", f"cpu{cpu}",
                                                   freq_mhz=2000.0 if hot else 3000.0,
                                                   throttled=hot))
    return thermal.thermal_frame(rows)


def draw_on_axes(rows, origin=0.0):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    handles = figures_thermal.draw_thermal(ax, rows, origin, 1.0)
    return fig, ax, handles


def test_timeline_without_thermal_source_says_so():
    import matplotlib.pyplot as plt

    no_samples = figures_thermal.samples_of(thermal.thermal_frame([]), "embedded")
    fig, ax, handles = draw_on_axes(no_samples)
    assert handles == [] and [t.get_text() for t in ax.texts] == ["no thermal source"]
    assert len(fig.axes) == 1
    plt.close(fig)


def test_timeline_draws_clock_temperature_and_events():
    import matplotlib.pyplot as plt

    cells = synthetic_cells(("embedded",), runs=("run1",), reps=2)
    samples = thermal_samples(cells, throttle_at=(("embedded", "run1", 1),))
    origin = float(cells["t_start_unix"].min())
    fig, ax, handles = draw_on_axes(figures_thermal.samples_of(samples, "embedded"), origin)
    labels = [h.get_label() for h in handles]
    assert labels[0].startswith("CPU clock") and labels[1].startswith("CPU temperature")
    events = samples[samples["throttled"].map(lambda v: v is True)]["t_unix"].drop_duplicates()
    assert labels[2] == f"throttle/pressure ({len(events)})"
    assert len(fig.axes) == 3  # clock and temperature on their own twin axes
    clock_axis = fig.axes[1]
    assert clock_axis.get_ylabel() == "clock (MHz)"
    # one line per rep (the line breaks between reps), against the cells' time axis
    assert len(clock_axis.lines) == 2
    xs = np.concatenate([line.get_xdata() for line in clock_axis.lines])
    assert xs.min() == pytest.approx(0.0)
    vertical = [line for line in ax.lines if len(set(line.get_xdata())) == 1]
    assert sorted(line.get_xdata()[0] for line in vertical) == pytest.approx(
        sorted(events - origin)
    )
    assert not ax.texts  # no "no thermal source" note
    plt.close(fig)


def test_timeline_with_thermal_is_reproducible_and_differs_without(tmp_path):
    cells = synthetic_cells(("embedded", "ollama"))
    ratios = synthetic_ratios(cells)
    samples = thermal_samples(cells, throttle_at=(("embedded", "run1", 2),))
    a = figures.make_all(cells, ratios, tmp_path / "a", thermal=samples)
    figures.make_all(cells, ratios, tmp_path / "b", thermal=samples)
    figures.make_all(cells, ratios, tmp_path / "c", thermal=thermal.thermal_frame([]))
    timeline = a["timeline"]["file"]
    assert (tmp_path / "a" / timeline).read_bytes() == (tmp_path / "b" / timeline).read_bytes()
    assert (tmp_path / "a" / timeline).read_bytes() != (tmp_path / "c" / timeline).read_bytes()
    # the other figures do not depend on the samples
    for fid in ("throughput", "positions"):
        assert (tmp_path / "a" / f"{fid}.png").read_bytes() == (
            tmp_path / "c" / f"{fid}.png"
        ).read_bytes()
    assert "thermal" in a["timeline"]["caption"]
    width, height = png_size(tmp_path / "a" / timeline)
    assert width > 300 and height > 200


def test_timeline_with_pressure_only_says_nothing_was_reported():
    import matplotlib.pyplot as plt

    rows = thermal.thermal_frame(
        [{"target": "embedded", "run": "run1", "rep": 1, "t_s": 0.0, "t_unix": 10.0}
         | thermal.reading("macos", "pmset", pressure="nominal")]
    )
    fig, ax, handles = draw_on_axes(figures_thermal.samples_of(rows, "embedded"))
    assert handles == [] and len(fig.axes) == 1
    assert [t.get_text() for t in ax.texts] == ["thermal: no throttling or pressure reported"]
    plt.close(fig)


# --- captions: written once (slotbench/figures/captions.py); the .rst files made from them: test_docs ---


def test_every_figure_has_one_title_and_caption():
    assert set(captions.TITLES) == set(captions.CAPTIONS) == set(figures.FIGURE_IDS)
    assert set(captions.OPEN_TITLES) == set(captions.OPEN_CAPTIONS) == set(figures_open.FIGURE_IDS)
    assert "rotation bias" not in captions.CAPTIONS["positions"].lower()


def test_a_caption_reads_as_plain_text_in_restructuredtext():
    docutils = pytest.importorskip("docutils.core")
    for fig_id in figures.FIGURE_IDS:
        quiet = {"report_level": 5}
        tree = docutils.publish_doctree(captions.caption_rst(fig_id), settings_overrides=quiet)
        text = " ".join(tree.astext().split())
        assert text.startswith(f"{captions.TITLES[fig_id]}. {captions.CAPTIONS[fig_id]}"), text
    odd = "a *b* `c` d_ e|f g_h"
    assert docutils.publish_doctree(captions.rst_text(odd)).astext() == odd



# --- the server's batch and queue over each cell -------------------------------------------------

from slotbench.figures import server as figures_server  # noqa: E402


def server_scrapes(cells, kind="llamacpp", batch_of=lambda arm: arm, step_s=0.5) -> pd.DataFrame:
    """Scrapes of every cell from 0.2 s before it to 0.2 s after, every ``step_s``: llama.cpp's
    lifetime counters (10 decode steps a second, ``batch_of(arm)`` busy slots each) and its
    deferred-requests gauge, or vLLM's running and waiting gauges."""
    rows, decodes, busy = [], {}, {}
    for c in cells.sort_values(["target", "run", "rep", "t_start_s"]).itertuples():
        key = (c.target, c.run, c.rep)
        d, b = decodes.get(key, 100.0), busy.get(key, 150.0)
        start, end = c.t_start_s, c.t_start_s + c.wall_s
        times = np.arange(start - 0.2, end + 0.2 + step_s, step_s)
        last = times[0]
        for t in times:
            running = t > start and t < end
            d += 10 * (t - last) if running else 0.0
            b += 10 * (t - last) * batch_of(c.arm) if running else 0.0
            last = t
            phase = "before" if t < start else "after" if t > end else "during"
            head = {"target": c.target, "run": c.run, "rep": c.rep, "arm": c.arm,
                    "position": c.position, "phase": phase, "t_s": float(t),
                    "source": "server", "role": "server", "labels": "{}", "error": None}
            if kind == "llamacpp":
                samples = [("llamacpp:n_decode_total", d), ("llamacpp:n_busy_slots_per_decode",
                                                            b / d),
                           ("llamacpp:requests_deferred", max(c.arm - batch_of(c.arm), 0))]
            else:
                samples = [("vllm:num_requests_running", batch_of(c.arm) if running else 0),
                           ("vllm:num_requests_waiting", 0.0)]
            rows += [head | {"metric": m, "value": float(v)} for m, v in samples]
        decodes[key], busy[key] = d, b
    return pd.DataFrame(rows)


def test_llamacpp_batch_between_scrapes_is_the_busy_slot_totals_difference_over_the_steps():
    rows = pd.DataFrame({
        "t_s": [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0],
        "metric": ["llamacpp:n_decode_total", "llamacpp:n_busy_slots_per_decode"] * 4,
        # 100 steps of 1 slot, then 10 steps of 4, then none, then 10 of 2
        "value": [100.0, 1.0, 110.0, 140 / 110, 110.0, 140 / 110, 120.0, 160 / 120],
        "error": None})
    per = figures_server.interval_batch(rows)
    assert per["t_s"].tolist() == [1.0, 2.0, 3.0]
    assert per["batch"].iloc[0] == pytest.approx(4.0)
    assert np.isnan(per["batch"].iloc[1])  # no decode step between the scrapes: no point
    assert per["batch"].iloc[2] == pytest.approx(2.0)


@pytest.mark.parametrize("kind", ["llamacpp", "vllm"])
def test_the_server_batch_figure_draws_the_typical_rep_and_names_its_cells(tmp_path, kind):
    cells = synthetic_cells(("embedded",), runs=("run1",), reps=3)
    samples = server_scrapes(cells, kind, batch_of=lambda arm: min(arm, 2))
    sources = figures.make_all(cells, synthetic_ratios(cells), tmp_path,
                               server_metrics=samples)
    src = sources["server_batch"]
    png_size(tmp_path / "server_batch.png")
    # rep 1's wiggle is 0: its rates are the medians, so it is the typical rep
    assert src["cells"] == [cell_label("embedded", "run1", 1, a) for a in ARMS]
    assert set(src["scrapes"]) == set(src["cells"])
    assert all(s["scrapes"] > 2 for s in src["scrapes"].values())
    series = figures_server.cell_series(
        samples[(samples["rep"] == 1) & (samples["arm"] == 4)])
    assert series["batch"].dropna().max() == pytest.approx(2.0)  # batching stopped at 2


def test_without_server_telemetry_the_figure_says_not_assessable_and_never_fails(tmp_path):
    cells = synthetic_cells(("embedded",), runs=("run1",), reps=2)
    empty = pd.DataFrame(columns=["target", "run", "rep", "arm", "position", "phase", "t_s",
                                  "source", "role", "metric", "labels", "value", "error"])
    for samples in (None, empty):
        sources = figures.make_all(cells, synthetic_ratios(cells), tmp_path,
                                   server_metrics=samples)
        assert sources["server_batch"]["cells"] == [] and sources["server_batch"]["scrapes"] == {}
        png_size(tmp_path / "server_batch.png")
