"""Energy read on this machine, beside any exporter: Intel/AMD RAPL through the powercap files
and NVIDIA GPUs through NVML. Each source answers ``read()`` with the same samples a parsed
/metrics gives (``telemetry.Sample``), so the scraper records them and the tables derive energy
from them exactly as from an exporter's counters.

RAPL: the top-level zones ``<root>/intel-rapl:N`` (one per CPU package, ``psys`` on some
laptops); their subzones (core, uncore, dram) are not read: core and uncore lie inside their
package, and dram is there on some servers only. Each zone gives
``slotbench_rapl_energy_joules_total{zone="package-0"}`` (``energy_uj`` / 1e6) and
``slotbench_rapl_max_energy_joules{zone=...}`` (``max_energy_range_uj`` / 1e6), the range after
which the counter wraps to zero; the derivation uses it to undo a wrap. Since 2020 most Linux
kernels make ``energy_uj`` readable by root only: then the source is unavailable, with the reason.

NVML: ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded, Volta and
later) per GPU, as ``slotbench_nvml_energy_joules_total{gpu="0"}``. The ``pynvml`` module
(package nvidia-ml-py) is imported only when asked for; without it, or without a driver, the
source is unavailable with the reason.
"""

from __future__ import annotations

from pathlib import Path

from slotbench.core.prometheus import NVML_ENERGY, RAPL_ENERGY, RAPL_MAX, Sample

RAPL_ROOT = Path("/sys/class/powercap")


class RaplSource:
    """The RAPL zones under ``root``; ``read()`` raises OSError when a file cannot be read."""

    name = "rapl"

    def __init__(self, root: Path | str = RAPL_ROOT):
        self.root = Path(root)

    def zones(self) -> list[Path]:
        """Top-level zones only (``intel-rapl:0``, not ``intel-rapl:0:0``)."""
        return sorted(p for p in self.root.glob("intel-rapl:*") if p.name.count(":") == 1)

    def read(self) -> list[Sample]:
        samples = []
        for zone in self.zones():
            labels = (("zone", (zone / "name").read_text().strip()),)
            energy_uj = int((zone / "energy_uj").read_text())
            max_uj = int((zone / "max_energy_range_uj").read_text())
            samples += [Sample(RAPL_ENERGY, labels, energy_uj / 1e6),
                        Sample(RAPL_MAX, labels, max_uj / 1e6)]
        return samples


def rapl(root: Path | str = RAPL_ROOT) -> tuple[RaplSource | None, str | None]:
    """The RAPL source when its zones can be read now, else (None, why)."""
    source = RaplSource(root)
    if not source.zones():
        return None, f"no RAPL zones under {source.root}"
    try:
        source.read()
    except PermissionError as exc:
        return None, f"RAPL energy not readable (root only on this kernel): {exc.filename}"
    except (OSError, ValueError) as exc:
        return None, f"RAPL unreadable: {type(exc).__name__}: {exc}"
    return source, None


class NvmlSource:
    """Every GPU NVML sees; ``read()`` raises pynvml's NVMLError when a reading fails."""

    name = "nvml"

    def __init__(self, pynvml, count: int):
        self.pynvml, self.count = pynvml, count

    def read(self) -> list[Sample]:
        nv = self.pynvml
        return [Sample(NVML_ENERGY, (("gpu", str(i)),),
                       nv.nvmlDeviceGetTotalEnergyConsumption(nv.nvmlDeviceGetHandleByIndex(i))
                       / 1000)
                for i in range(self.count)]


def nvml() -> tuple[NvmlSource | None, str | None]:
    """The NVML source when the driver answers and every GPU reports energy, else (None, why)."""
    try:
        import pynvml
    except ImportError:
        return None, "pynvml (package nvidia-ml-py) is not installed"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return None, "NVML sees no GPU"
        source = NvmlSource(pynvml, count)
        source.read()  # pre-Volta GPUs do not count energy: NotSupported
    except Exception as exc:  # noqa: BLE001 - pynvml raises NVMLError and its many subclasses
        return None, f"NVML unavailable: {type(exc).__name__}: {exc}"
    return source, None


def local_sources(root: Path | str = RAPL_ROOT) -> tuple[list, dict[str, str]]:
    """The energy sources this machine can read (each with ``.name`` and ``.read()``), and why
    each of the others cannot be, by name."""
    available, unavailable = [], {}
    for name, (source, why) in (("rapl", rapl(root)), ("nvml", nvml())):
        if source is None:
            unavailable[name] = why
        else:
            available.append(source)
    return available, unavailable
