"""Thermal state during a rep (docs/method.md#thermal-state-and-drift): the sources the
background sampler reads.

The article lost 8.2% between burst and plateau while macOS reported thermal pressure in zero
of 424 samples: a quiet sensor is weak evidence, so the pipeline reports both what the machine
said (sampled by slotbench.measure.sampler during every rep) and what the serial arm did over time
(slotbench.checks.drift), and lets the reader weigh them.

Each source reads what its platform exposes without root and returns one dict per sensor
reading; the sampler adds the time. Sources never see the network and cost a few file reads or
one short subprocess per sample.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the sampler runs in every rep job: pandas only where frames are made
    import pandas as pd


READING_KEYS = ["source", "sensor", "temp_c", "freq_mhz", "throttled", "pressure", "detail"]
THERMAL_COLUMNS = ["target", "run", "t_s", "t_unix"] + READING_KEYS
NOMINAL = "nominal"
COMMAND_TIMEOUT_S = 5.0


def reading(
    source: str,
    sensor: str | None,
    temp_c: float | None = None,
    freq_mhz: float | None = None,
    throttled: bool | None = None,
    pressure: str | None = None,
    detail: str | None = None,
) -> dict:
    """One sensor reading in the shape every source returns."""
    return {"source": source, "sensor": sensor, "temp_c": temp_c, "freq_mhz": freq_mhz,
            "throttled": throttled, "pressure": pressure, "detail": detail}


def run_command(cmd: list[str]) -> str:
    """Stdout of a short command; a non-zero exit raises with what the command said."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                          check=False)
    if proc.returncode != 0:
        said = (proc.stdout + " " + proc.stderr).strip()
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {said[:300]}")
    return proc.stdout


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    return path.read_text().strip()


def _numeric_key(path: Path) -> tuple[str, int]:
    match = re.search(r"(\d+)$", path.name)
    return (path.name.rstrip("0123456789"), int(match.group(1)) if match else -1)


class LinuxThermal:
    """sysfs: thermal zones (millidegrees C), cpufreq (kHz) and Intel throttle counters.

    ``*_throttle_count`` only ever grows; an increase between two samples means the CPU was
    throttled in between. The first sample of a CPU sets the baseline (throttled None), so
    throttling before the run is not charged to it.
    """

    name = "linux"

    def __init__(self, root: str | Path = "/"):
        self.root = Path(root)
        self._counts: dict[tuple[str, str], int] = {}

    @property
    def thermal_dir(self) -> Path:
        return self.root / "sys" / "class" / "thermal"

    @property
    def cpu_dir(self) -> Path:
        return self.root / "sys" / "devices" / "system" / "cpu"

    def zones(self) -> list[Path]:
        if not self.thermal_dir.is_dir():
            return []
        found = [z for z in self.thermal_dir.glob("thermal_zone*") if (z / "temp").exists()]
        return sorted(found, key=_numeric_key)

    def cpus(self) -> list[Path]:
        if not self.cpu_dir.is_dir():
            return []
        found = [
            c for c in self.cpu_dir.glob("cpu*")
            if re.fullmatch(r"cpu\d+", c.name)
            and ((c / "cpufreq" / "scaling_cur_freq").exists()
                 or any((c / "thermal_throttle").glob("*_throttle_count")))
        ]
        return sorted(found, key=_numeric_key)

    def available(self) -> bool:
        return bool(self.zones() or self.cpus())

    def sample(self) -> list[dict]:
        rows = []
        for zone in self.zones():
            try:
                kind = _read_text(zone / "type")
            except OSError:
                kind = "unknown"
            sensor = f"{zone.name}/{kind}"
            try:
                rows.append(
                    reading(self.name, sensor, temp_c=int(_read_text(zone / "temp")) / 1000)
                )
            except (OSError, ValueError) as exc:  # some zones refuse reads (EINVAL, ENODATA)
                rows.append(reading(self.name, sensor, detail=f"unreadable: {exc}"))
        for cpu in self.cpus():
            rows.append(self._cpu_reading(cpu))
        return rows

    def _cpu_reading(self, cpu: Path) -> dict:
        freq, notes = None, []
        freq_file = cpu / "cpufreq" / "scaling_cur_freq"
        if freq_file.exists():
            try:
                freq = int(_read_text(freq_file)) / 1000
            except (OSError, ValueError) as exc:
                notes.append(f"scaling_cur_freq unreadable: {exc}")
        throttled = None
        counters = sorted((cpu / "thermal_throttle").glob("*_throttle_count"))
        rises, baseline = [], False
        for counter in counters:
            try:
                count = int(_read_text(counter))
            except (OSError, ValueError) as exc:
                notes.append(f"{counter.name} unreadable: {exc}")
                continue
            key = (cpu.name, counter.name)
            before = self._counts.get(key)
            self._counts[key] = count
            if before is None:
                baseline = True
            elif count > before:
                rises.append(f"{counter.name} +{count - before}")
        if rises:
            throttled = True
            notes.append("throttled: " + ", ".join(rises))
        elif counters and not baseline:
            throttled = False
        elif counters:
            notes.append("throttle counters: baseline")
        return reading(self.name, cpu.name, freq_mhz=freq, throttled=throttled,
                       detail="; ".join(notes) or None)


_LEVEL = r"\s*(?:=|:|set to)\s*(\w+)"
_QUIET_LEVELS = {"0", "normal", "nominal"}


def parse_pmset_therm(text: str, source: str = "macos") -> dict:
    """One reading from ``pmset -g therm``.

    Intel Macs print ``CPU_Speed_Limit = N`` (below 100: the CPU is capped). Recorded thermal or
    performance warning levels mean pressure; "No thermal warning level has been recorded" (the
    usual answer on Apple Silicon, even while it slows down) means nominal.
    """
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    problems, understood = [], False
    speed = None
    match = re.search(r"CPU_Speed_Limit\s*=\s*(\d+)", text)
    if match:
        understood = True
        speed = int(match.group(1))
        if speed < 100:
            problems.append(f"CPU speed limit {speed}%")
    for kind in ("thermal", "performance"):
        if re.search(rf"No {kind} warning level has been recorded", text, re.IGNORECASE):
            understood = True
            continue
        level = re.search(rf"{kind}[ _]?(?:warning[ _]?)?level{_LEVEL}", text, re.IGNORECASE)
        if level:
            understood = True
            if level.group(1).lower() not in _QUIET_LEVELS:
                problems.append(f"{kind} warning level {level.group(1)}")
    if not understood:
        return reading(source, "pmset", detail=f"pmset output not understood: {flat[:200]}")
    pressure = "; ".join(problems) if problems else NOMINAL
    throttled = None if speed is None else speed < 100
    return reading(source, "pmset", throttled=throttled, pressure=pressure, detail=flat[:300])


class MacThermal:
    """``pmset -g therm``: the thermal and performance warning levels macOS shows without root."""

    name = "macos"
    command = ["pmset", "-g", "therm"]

    def __init__(self, run: Callable[[list[str]], str] = run_command):
        self.run = run

    def sample(self) -> list[dict]:
        return [parse_pmset_therm(self.run(self.command), self.name)]


# NVML clocks event reasons (nvml.h, nvmlClocksEventReason*; formerly ...ThrottleReason*).
CLOCK_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean heat or power took clock away from the workload (idle, sync boost and
# clock settings are choices, not pressure).
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
NVIDIA_FIELDS = "index,temperature.gpu,clocks.sm,clocks_event_reasons.active"
# Drivers before the R535 rename only know the old name.
NVIDIA_LEGACY_FIELDS = "index,temperature.gpu,clocks.sm,clocks_throttle_reasons.active"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_nvidia_smi(text: str, source: str = "nvidia") -> list[dict]:
    """Readings from ``nvidia-smi --query-gpu=<NVIDIA_FIELDS> --format=csv,noheader,nounits``."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        index, temp, clock, reasons = parts[:4]
        throttled, detail = None, None
        try:
            mask = int(reasons, 0)
        except ValueError:
            detail = f"clock event reasons: {reasons}"
        else:
            active = [name for bit, name in CLOCK_REASONS.items() if mask & bit]
            throttled = bool(mask & THROTTLE_MASK)
            detail = f"clock event reasons {reasons}: " + (", ".join(active) or "none")
        rows.append(reading(source, f"gpu{index}", temp_c=_number(temp), freq_mhz=_number(clock),
                            throttled=throttled, detail=detail))
    return rows


class NvidiaSmi:
    """GPU temperature, SM clock and the active clock event reasons, one reading per GPU."""

    name = "nvidia"

    def __init__(self, run: Callable[[list[str]], str] = run_command, binary: str = "nvidia-smi"):
        self.run = run
        self.binary = binary
        self.fields = NVIDIA_FIELDS

    def _command(self) -> list[str]:
        return [self.binary, f"--query-gpu={self.fields}", "--format=csv,noheader,nounits"]

    def sample(self) -> list[dict]:
        try:
            text = self.run(self._command())
        except RuntimeError as exc:
            if self.fields == NVIDIA_LEGACY_FIELDS or "field" not in str(exc).lower():
                raise
            self.fields = NVIDIA_LEGACY_FIELDS
            text = self.run(self._command())
        return parse_nvidia_smi(text, self.name)


class ProcCpuinfo:
    """Linux without thermal zones or cpufreq (many VMs): the clock each CPU reports in
    /proc/cpuinfo. It shows frequency drift, not temperature or throttling."""

    name = "cpuinfo"

    def __init__(self, root: str | Path = "/"):
        self.path = Path(root) / "proc" / "cpuinfo"

    def available(self) -> bool:
        try:
            return "cpu MHz" in _read_text(self.path)
        except OSError:
            return False

    def sample(self) -> list[dict]:
        rows, cpu = [], None
        for line in _read_text(self.path).splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "processor":
                cpu = value.strip()
            elif key.strip() == "cpu MHz":
                rows.append(reading(self.name, f"cpu{cpu}", freq_mhz=_number(value)))
        return rows


def available_sources(
    root: str | Path = "/",
    platform: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> list:
    """The sources that can say something on this machine (root, platform, which: for tests)."""
    platform = sys.platform if platform is None else platform
    sources: list = []
    linux = LinuxThermal(root)
    if linux.available():
        sources.append(linux)
    elif platform.startswith("linux") and ProcCpuinfo(root).available():
        sources.append(ProcCpuinfo(root))
    if platform == "darwin" and which("pmset"):
        sources.append(MacThermal())
    nvidia = which("nvidia-smi")
    if nvidia:
        sources.append(NvidiaSmi(binary=nvidia))
    return sources


def thermal_frame(rows: list[dict]) -> pd.DataFrame:
    """Sampler rows as a DataFrame with the standard columns first (extra tags kept)."""
    import pandas as pd

    df = pd.DataFrame(rows)
    extra = [c for c in df.columns if c not in THERMAL_COLUMNS]
    return df.reindex(columns=THERMAL_COLUMNS + extra)


def is_event(df: pd.DataFrame) -> pd.Series:
    """Throttled readings, or pressure other than nominal (unknown pressure is not an event)."""
    import numpy as np

    throttled = df["throttled"].map(lambda v: isinstance(v, bool | np.bool_) and bool(v))
    pressure = df["pressure"]
    pressured = pressure.notna() & (pressure.astype(str).str.strip().str.lower() != NOMINAL)
    return throttled | pressured
