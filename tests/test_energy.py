"""Energy read on this machine: RAPL's powercap files (a recorded tree, a wrap of its counter,
a tree only root may read) and NVML (a fake pynvml, and none), each as the samples a parsed
/metrics gives, so the scraper records them and the window derives energy from them."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from slotbench.core import prometheus as pm
from slotbench.measure import energy
from slotbench.measure import telemetry as tm

MAX_UJ = 262_143_328_850  # a real package zone's max_energy_range_uj


def zone(root: Path, name: str, path: str, energy_uj: int, max_uj: int = MAX_UJ) -> Path:
    d = root / path
    d.mkdir(parents=True, exist_ok=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


def recorded_tree(root: Path, package_uj: int, psys_uj: int = 0) -> None:
    """The powercap tree of a one-socket laptop: a package with its core subzone, and psys."""
    zone(root, "package-0", "intel-rapl:0", package_uj)
    zone(root, "core", "intel-rapl:0/intel-rapl:0:0", package_uj // 2)
    zone(root, "psys", "intel-rapl:1", psys_uj)
    (root / "intel-rapl-mmio:0").mkdir()  # the same package again, over MMIO: not read


def test_rapl_reads_the_top_level_zones_in_joules(tmp_path):
    recorded_tree(tmp_path, 12_500_000, 40_000_000)
    source, why = energy.rapl(tmp_path)
    assert why is None and source.name == "rapl"
    assert sorted(source.read(), key=lambda s: (s.metric, s.labels)) == [
        pm.Sample(pm.RAPL_ENERGY, (("zone", "package-0"),), 12.5),
        pm.Sample(pm.RAPL_ENERGY, (("zone", "psys"),), 40.0),
        pm.Sample(pm.RAPL_MAX, (("zone", "package-0"),), MAX_UJ / 1e6),
        pm.Sample(pm.RAPL_MAX, (("zone", "psys"),), MAX_UJ / 1e6),
    ]


def test_a_rapl_counter_that_wrapped_between_the_edges_is_unwrapped(tmp_path):
    """1 J before its range at the start, 4 J past zero at the end: 5 J in the window; psys,
    which overlaps the package, is not added."""
    from test_telemetry import raw_of, rows_of

    from slotbench.tables import telemetry as tt

    source = energy.RaplSource(tmp_path)
    recorded_tree(tmp_path, MAX_UJ - 1_000_000, 0)
    before = tm.Scrape(0.0, "rapl", source.read())
    zone(tmp_path, "package-0", "intel-rapl:0", 4_000_000)
    zone(tmp_path, "psys", "intel-rapl:1", 90_000_000)
    after = tm.Scrape(1.0, "rapl", source.read())
    got = tt.window(rows_of(raw_of([before, after], [before], [after], {"rapl": "local"})),
                    0.0, 1.0, 0.25)
    assert got["energy_j"] == pytest.approx(5.0)
    assert got["energy_source"] == f"{pm.RAPL_ENERGY} from rapl"
    # a step back by more than the range is no wrap: a reset, not assessable
    tiny = energy.RaplSource(tmp_path)
    zone(tmp_path, "package-0", "intel-rapl:0", 9_000_000, max_uj=1_000_000)
    first = tm.Scrape(0.0, "rapl", tiny.read())
    zone(tmp_path, "package-0", "intel-rapl:0", 1_000, max_uj=1_000_000)
    second = tm.Scrape(1.0, "rapl", tiny.read())
    reset = tt.window(rows_of(raw_of([first, second], [first], [second])), 0.0, 1.0, 0.25)
    assert reset["energy_j"] is None


def test_rapl_readable_by_root_only_or_absent_is_unavailable_with_the_reason(tmp_path,
                                                                            monkeypatch):
    recorded_tree(tmp_path, 1)
    real_read = Path.read_text

    def root_only(path, *args, **kwargs):
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", root_only)
    source, why = energy.rapl(tmp_path)
    assert source is None
    assert why == ("RAPL energy not readable (root only on this kernel): "
                   f"{tmp_path}/intel-rapl:0/energy_uj")
    assert energy.rapl(tmp_path / "nowhere") == (None, f"no RAPL zones under {tmp_path}/nowhere")


def test_the_scraper_reads_local_sources_beside_urls_and_a_failure_is_missing(tmp_path):
    from doubles.exporter import Exporter

    recorded_tree(tmp_path, 2_000_000)
    rapl = energy.RaplSource(tmp_path)
    broken = types.SimpleNamespace(name="broken", read=lambda: 1 / 0)
    with Exporter({"up": ("gauge", lambda t: 1)}) as up, \
            tm.Scraper([up.url + "/metrics", rapl, broken], 0.05) as scraper:
        taken = scraper.scrape_now()
        (tmp_path / "intel-rapl:1" / "energy_uj").write_text("not a number\n")
        [_, unreadable, _] = scraper.scrape_now()
    assert [s.source for s in taken] == [up.url + "/metrics", "rapl", "broken"]
    assert pm.value(taken[0].samples, "up") == 1
    assert len(taken[1].samples) == 4 and taken[1].error is None
    assert taken[2].samples is None and taken[2].error == "ZeroDivisionError: division by zero"
    assert unreadable.samples is None and unreadable.error.startswith("ValueError: ")


def fake_pynvml(gpus: int = 2, fail_init: bool = False) -> types.ModuleType:
    """pynvml as nvidia-ml-py has it, as far as the energy source uses it: GPU i has used
    (i + 1) * 1000 J, in millijoules."""
    fake = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init():
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    fake.NVMLError = NVMLError
    fake.nvmlInit = init
    fake.nvmlDeviceGetCount = lambda: gpus
    fake.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    fake.nvmlDeviceGetTotalEnergyConsumption = lambda h: (h[1] + 1) * 1_000_000
    return fake


def test_nvml_gives_each_gpus_energy_in_joules(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus=2))
    source, why = energy.nvml()
    assert why is None and source.name == "nvml"
    assert source.read() == [pm.Sample(pm.NVML_ENERGY, (("gpu", "0"),), 1000.0),
                             pm.Sample(pm.NVML_ENERGY, (("gpu", "1"),), 2000.0)]


def test_nvml_without_a_driver_or_without_pynvml_is_unavailable(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))
    assert energy.nvml() == (None, "NVML unavailable: NVMLError: Driver Not Loaded")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert energy.nvml() == (None, "pynvml (package nvidia-ml-py) is not installed")
    recorded_tree(tmp_path, 1)
    available, unavailable = energy.local_sources(tmp_path)
    assert [s.name for s in available] == ["rapl"]
    assert unavailable == {"nvml": "pynvml (package nvidia-ml-py) is not installed"}
    available, unavailable = energy.local_sources(tmp_path / "nowhere")
    assert available == [] and set(unavailable) == {"rapl", "nvml"}
