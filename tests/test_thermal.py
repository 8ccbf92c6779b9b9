"""Thermal sources on fake sysfs trees and fake command output, the sampler thread, and the
serial arm's burst-to-plateau drift."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from slotbench.checks import drift
from slotbench.checks import thermal as thermal_check
from slotbench.measure import thermal
from slotbench.measure.sampler import Sampler

# --------------------------------------------------------------------------------------------
# Linux sysfs
# --------------------------------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def fake_sysfs(root: Path, throttle=True) -> Path:
    zones = root / "sys" / "class" / "thermal"
    write(zones / "thermal_zone0" / "temp", "45000")
    write(zones / "thermal_zone0" / "type", "x86_pkg_temp")
    write(zones / "thermal_zone1" / "temp", "38500")
    write(zones / "thermal_zone1" / "type", "acpitz")
    (zones / "cooling_device0").mkdir()  # not a zone: ignored
    cpus = root / "sys" / "devices" / "system" / "cpu"
    for i, khz in enumerate([2400000, 1800000]):
        write(cpus / f"cpu{i}" / "cpufreq" / "scaling_cur_freq", str(khz))
        if throttle:
            write(cpus / f"cpu{i}" / "thermal_throttle" / "core_throttle_count", "3")
            write(cpus / f"cpu{i}" / "thermal_throttle" / "package_throttle_count", "0")
    (cpus / "cpufreq").mkdir()  # policy directory, not a CPU
    return root


def by_sensor(rows):
    return {r["sensor"]: r for r in rows}


def test_linux_reads_zones_and_frequencies(tmp_path):
    src = thermal.LinuxThermal(fake_sysfs(tmp_path, throttle=False))
    rows = by_sensor(src.sample())
    assert set(rows) == {"thermal_zone0/x86_pkg_temp", "thermal_zone1/acpitz", "cpu0", "cpu1"}
    assert rows["thermal_zone0/x86_pkg_temp"]["temp_c"] == 45.0
    assert rows["thermal_zone1/acpitz"]["temp_c"] == 38.5
    assert rows["cpu0"]["freq_mhz"] == 2400.0 and rows["cpu1"]["freq_mhz"] == 1800.0
    assert all(r["throttled"] is None and r["source"] == "linux" for r in rows.values())
    assert all(set(r) == set(thermal.READING_KEYS) for r in rows.values())


def test_linux_throttle_count_increase_fires(tmp_path):
    root = fake_sysfs(tmp_path)
    src = thermal.LinuxThermal(root)
    first = by_sensor(src.sample())
    assert first["cpu0"]["throttled"] is None  # baseline: earlier throttling is not charged
    assert "baseline" in first["cpu0"]["detail"]
    quiet = by_sensor(src.sample())
    assert quiet["cpu0"]["throttled"] is False and quiet["cpu1"]["throttled"] is False
    write(root / "sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "5")
    hot = by_sensor(src.sample())
    assert hot["cpu0"]["throttled"] is True
    assert "core_throttle_count +2" in hot["cpu0"]["detail"]
    assert hot["cpu1"]["throttled"] is False
    assert by_sensor(src.sample())["cpu0"]["throttled"] is False  # no further increase


def test_linux_unreadable_zone_is_a_row_not_an_exception(tmp_path):
    root = fake_sysfs(tmp_path, throttle=False)
    write(root / "sys/class/thermal/thermal_zone2/temp", "not-a-number")
    rows = by_sensor(thermal.LinuxThermal(root).sample())
    bad = next(r for s, r in rows.items() if s.startswith("thermal_zone2"))
    assert bad["temp_c"] is None and bad["detail"].startswith("unreadable")


def test_available_sources(tmp_path):
    nothing = lambda name: None  # noqa: E731
    assert thermal.available_sources(tmp_path, platform="linux", which=nothing) == []
    fake_sysfs(tmp_path)
    found = thermal.available_sources(tmp_path, platform="linux", which=nothing)
    assert [s.name for s in found] == ["linux"]
    everything = lambda name: f"/usr/bin/{name}"  # noqa: E731
    found = thermal.available_sources(tmp_path / "none", platform="darwin", which=everything)
    assert [s.name for s in found] == ["macos", "nvidia"]
    assert found[1].binary == "/usr/bin/nvidia-smi"
    # pmset is only asked for on macOS
    assert [s.name for s in thermal.available_sources(tmp_path / "none", "linux", everything)] == [
        "nvidia"
    ]


# --------------------------------------------------------------------------------------------
# macOS pmset and nvidia-smi parsing
# --------------------------------------------------------------------------------------------

APPLE_SILICON_QUIET = """Note: No thermal warning level has been recorded
Note: No performance warning level has been recorded
Note: No CPU power status has been recorded
"""
INTEL_QUIET = """Note: No thermal warning level has been recorded
Note: No performance warning level has been recorded
2024-05-02 10:00:00 +0100 CPU Power notify
\tCPU_Scheduler_Limit \t= 100
\tCPU_Available_CPUs \t= 8
\tCPU_Speed_Limit \t= 100
"""
INTEL_CAPPED = INTEL_QUIET.replace("CPU_Speed_Limit \t= 100", "CPU_Speed_Limit \t= 35")
WARNING_RECORDED = """Thermal Warning Level = 1
Note: No performance warning level has been recorded
"""


def test_pmset_quiet_is_nominal():
    for text in (APPLE_SILICON_QUIET, INTEL_QUIET):
        row = thermal.parse_pmset_therm(text)
        assert row["pressure"] == "nominal"
    assert thermal.parse_pmset_therm(APPLE_SILICON_QUIET)["throttled"] is None
    assert thermal.parse_pmset_therm(INTEL_QUIET)["throttled"] is False


def test_pmset_speed_limit_and_warning_level_fire():
    capped = thermal.parse_pmset_therm(INTEL_CAPPED)
    assert capped["throttled"] is True and "CPU speed limit 35%" in capped["pressure"]
    warned = thermal.parse_pmset_therm(WARNING_RECORDED)
    assert warned["pressure"] == "thermal warning level 1" and warned["throttled"] is None


def test_pmset_unknown_output_is_not_nominal():
    row = thermal.parse_pmset_therm("pmset: something else entirely")
    assert row["pressure"] is None and "not understood" in row["detail"]


def test_mac_source_uses_the_command():
    seen = []
    src = thermal.MacThermal(run=lambda cmd: seen.append(cmd) or INTEL_CAPPED)
    (row,) = src.sample()
    assert seen == [["pmset", "-g", "therm"]] and row["source"] == "macos" and row["throttled"]


NVIDIA_OUT = """0, 83, 1410, 0x0000000000000040
1, 45, 1980, 0x0000000000000000
2, 35, 210, 0x0000000000000001
3, 70, 1700, 0x0000000000000004
4, [N/A], [N/A], [Not Supported]
"""


def test_nvidia_reasons():
    rows = by_sensor(thermal.parse_nvidia_smi(NVIDIA_OUT))
    assert rows["gpu0"]["throttled"] is True and "hw_thermal_slowdown" in rows["gpu0"]["detail"]
    assert rows["gpu0"]["temp_c"] == 83.0 and rows["gpu0"]["freq_mhz"] == 1410.0
    assert rows["gpu1"]["throttled"] is False
    assert rows["gpu2"]["throttled"] is False and "gpu_idle" in rows["gpu2"]["detail"]  # idle
    assert rows["gpu3"]["throttled"] is True and "sw_power_cap" in rows["gpu3"]["detail"]
    assert rows["gpu4"]["throttled"] is None and rows["gpu4"]["temp_c"] is None


def test_nvidia_falls_back_to_legacy_field_name():
    calls = []

    def run(cmd):
        calls.append(cmd[1])
        if "clocks_event_reasons" in cmd[1]:
            raise RuntimeError('Field "clocks_event_reasons.active" is not a valid field to query.')
        return "0, 60, 1500, 0x0000000000000020\n"

    src = thermal.NvidiaSmi(run=run)
    assert src.sample()[0]["throttled"] is True
    assert src.sample()[0]["throttled"] is True
    assert (
        calls
        == [f"--query-gpu={thermal.NVIDIA_FIELDS}"]
        + [f"--query-gpu={thermal.NVIDIA_LEGACY_FIELDS}"] * 2
    )


# --------------------------------------------------------------------------------------------
# Sampler
# --------------------------------------------------------------------------------------------


class FakeSource:
    """Reports throttling on every ``every``-th sample (0: never)."""

    name = "fake"

    def __init__(self, every=0, pressure="nominal"):
        self.every, self.pressure, self.n = every, pressure, 0

    def sample(self):
        self.n += 1
        hot = bool(self.every) and self.n % self.every == 0
        return [thermal.reading("fake", "die", temp_c=90.0 if hot else 50.0, freq_mhz=2000.0,
                                throttled=hot, pressure=self.pressure)]


class Broken:
    name = "broken"

    def sample(self):
        raise OSError("sensor went away")


def run_sampler(sources, seconds=0.4, interval=0.05, **kw):
    sampler = Sampler(sources, interval_s=interval, **kw)
    with sampler:
        time.sleep(seconds)
    return sampler


def test_sampler_collects_at_its_interval_and_stops_promptly():
    sampler = Sampler([FakeSource()], interval_s=0.05, tags={"target": "t"})
    sampler.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    sampler.stop()
    assert time.monotonic() - t0 < 0.5 and not sampler.running
    rows = sampler.rows()
    assert 5 <= len(rows) <= 13  # about 10 at 20 Hz, with room for a busy 2-core machine
    t = np.array([r["t_s"] for r in rows])
    assert t[0] < 0.05 and np.all(np.diff(t) > 0)
    assert 0.03 < np.median(np.diff(t)) < 0.1
    assert all(r["target"] == "t" and "t_unix" in r for r in rows)
    n = len(sampler.rows())
    time.sleep(0.12)
    assert len(sampler.rows()) == n  # nothing after stop


def test_sampler_stop_does_not_wait_for_the_interval():
    sampler = Sampler([FakeSource()], interval_s=30.0).start()
    time.sleep(0.05)
    t0 = time.monotonic()
    sampler.stop()
    assert time.monotonic() - t0 < 0.5 and not sampler.running
    assert len(sampler.rows()) == 1


def test_sampler_origin_sets_the_clock():
    origin = time.monotonic() - 100.0
    sampler = run_sampler([FakeSource()], seconds=0.06, origin=origin)
    assert sampler.rows()[0]["t_s"] >= 100.0


def test_sampler_records_source_errors_and_keeps_going():
    sampler = run_sampler([Broken(), FakeSource()], seconds=0.2)
    frame = thermal.thermal_frame(sampler.rows())
    errors = frame[frame["source"] == "broken"]
    assert len(errors) >= 2 and errors["detail"].str.contains("sensor went away").all()
    assert (frame["source"] == "fake").sum() == len(errors)
    assert not sampler.running


def frame_from(sampler, target="t", run="run1"):
    frame = thermal.thermal_frame(sampler.rows())
    frame["target"], frame["run"] = target, run
    return frame


def test_throttling_source_gives_events():
    frame = frame_from(run_sampler([FakeSource(every=3)], seconds=0.4))
    summary = thermal_check.thermal_summary(frame)
    assert list(summary.columns) == thermal_check.SUMMARY_COLUMNS
    row = summary.iloc[0]
    expected = int(frame["throttled"].sum())
    assert expected >= 1 and row["throttle_events"] == expected
    assert row["samples"] == len(frame) and row["sources"] == "fake"
    assert row["max_temp_c"] == 90.0 and row["errors"] == 0
    listed = thermal_check.events(frame)
    assert len(listed) == expected and listed["throttled"].all()
    assert row["first_event_t_s"] == pytest.approx(listed["t_s"].min())


def test_pressure_counts_as_an_event():
    frame = frame_from(run_sampler([FakeSource(pressure="thermal warning level 1")], 0.12))
    assert thermal_check.thermal_summary(frame).iloc[0]["throttle_events"] == len(frame)


def test_clean_source_gives_no_events():
    clean = frame_from(run_sampler([FakeSource()], seconds=0.2))
    broken = frame_from(run_sampler([Broken()], seconds=0.1), run="run2")
    summary = thermal_check.thermal_summary(pd.concat([clean, broken], ignore_index=True))
    assert summary["throttle_events"].tolist() == [0, 0]
    assert summary["errors"].tolist() == [0, len(broken)]
    assert summary["first_event_t_s"].isna().all()
    assert thermal_check.events(clean).empty


def test_summary_of_real_linux_rows(tmp_path):
    root = fake_sysfs(tmp_path)
    src = thermal.LinuxThermal(root)
    sampler = Sampler([src], interval_s=0.05, tags={"target": "t", "run": "r"})
    sampler.sample_once()
    sampler.sample_once()
    write(root / "sys/devices/system/cpu/cpu1/thermal_throttle/package_throttle_count", "1")
    sampler.sample_once()
    summary = thermal_check.thermal_summary(thermal.thermal_frame(sampler.rows())).iloc[0]
    assert summary["samples"] == 3 and summary["throttle_events"] == 1
    assert summary["max_temp_c"] == 45.0
    assert summary["min_freq_mhz"] == 1800.0 and summary["max_freq_mhz"] == 2400.0


def test_summary_of_nothing():
    assert thermal_check.thermal_summary(thermal.thermal_frame([])).empty
    assert thermal_check.events(thermal.thermal_frame([])).empty


# --------------------------------------------------------------------------------------------
# Burst versus plateau
# --------------------------------------------------------------------------------------------


def cells_with(serial_tps, target="t", run="run1", t0=1.7e9, arms=(1, 2, 4)):
    """One rep per serial value, arms rotated; parallel arms flat, to be ignored."""
    rows = []
    for rep, tps in enumerate(serial_tps):
        for i, arm in enumerate(arms):
            position = (i + rep) % len(arms)
            rows.append({"target": target, "run": run, "rep": rep, "arm": arm,
                         "position": position, "agg_tps": tps if arm == 1 else 70.0 - rep,
                         "t_start_unix": t0 + 60.0 * rep + 15.0 * position})
    return pd.DataFrame(rows)


def decaying(n=20, burst=50.0, loss=0.082, seed=1):
    """First quarter at burst, last half at plateau, a ramp between; symmetric noise."""
    plateau = burst * (1 - loss)
    rng = np.random.default_rng(seed)
    q, h = n // 4, n // 2
    values = np.concatenate([
        np.full(q, burst), np.linspace(burst, plateau, n - q - h + 2)[1:-1], np.full(h, plateau)
    ])
    noise = rng.normal(0, 0.3, n)
    noise[:q] -= np.median(noise[:q])
    noise[-h:] -= np.median(noise[-h:])
    return values + noise


def test_burst_vs_plateau_reproduces_the_article_loss():
    cells = cells_with(decaying()).sample(frac=1.0, random_state=3)  # row order must not matter
    out = drift.burst_vs_plateau(cells)
    assert list(out.columns) == drift.BURST_COLUMNS
    row = out.iloc[0]
    assert row["n_serial"] == 20
    assert row["change"] == pytest.approx(-0.082, abs=1e-6)
    assert row["burst_tps"] == pytest.approx(50.0) and row["plateau_tps"] == pytest.approx(45.9)
    burst = row["burst_cells"].split(";")
    assert burst == [f"t/run1/rep{r}/arm1" for r in range(5)]
    assert row["plateau_cells"].split(";") == [f"t/run1/rep{r}/arm1" for r in range(10, 20)]
    assert row["span_s"] > 0


def test_burst_vs_plateau_flat_is_near_zero():
    rng = np.random.default_rng(7)
    out = drift.burst_vs_plateau(cells_with(50.0 + rng.normal(0, 0.5, 20)))
    assert abs(out.iloc[0]["change"]) < 0.02


def test_burst_vs_plateau_orders_by_time_across_runs_and_targets():
    first = cells_with([50.0] * 4, run="run1", t0=1.7e9)
    second = cells_with([46.0] * 4, run="run2", t0=1.7e9 + 10_000)
    other = cells_with([30.0, 30.0, 33.0, 33.0], target="u")
    cells = pd.concat([second, other, first], ignore_index=True)
    out = drift.burst_vs_plateau(cells).set_index("target")
    assert out.loc["t", "n_serial"] == 8
    assert out.loc["t", "change"] == pytest.approx(46.0 / 50.0 - 1)
    assert out.loc["u", "change"] == pytest.approx(0.1)
    per_run = drift.burst_vs_plateau(cells, by=("target", "run"))
    assert per_run.loc[per_run["target"] == "t", "change"].tolist() == [0.0, 0.0]


def test_burst_vs_plateau_needs_two_serial_cells():
    out = drift.burst_vs_plateau(cells_with([50.0]))
    assert out.iloc[0]["n_serial"] == 1 and np.isnan(out.iloc[0]["change"])
    with pytest.raises(ValueError, match="burst_frac"):
        drift.burst_vs_plateau(cells_with([50.0, 49.0]), burst_frac=0)


def test_proc_cpuinfo_is_the_fallback_where_sysfs_has_nothing(tmp_path):
    from slotbench.measure.thermal import ProcCpuinfo, available_sources

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(
        "processor\t: 0\ncpu MHz\t\t: 2596.1\n\nprocessor\t: 1\ncpu MHz\t\t: 1800.0\n"
    )
    sources = available_sources(root=tmp_path, platform="linux", which=lambda _: None)
    assert [s.name for s in sources] == ["cpuinfo"]
    rows = ProcCpuinfo(tmp_path).sample()
    assert [(r["sensor"], r["freq_mhz"]) for r in rows] == [("cpu0", 2596.1), ("cpu1", 1800.0)]
    assert available_sources(root=tmp_path / "nothing", platform="linux", which=lambda _: None) == []
