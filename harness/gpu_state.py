"""GPU clocks and clock-throttle reasons around the timing phase (NVML, else nvidia-smi).

Why: a sample taken while the GPU was thermally or power throttled is slow for a reason that is
not the kernel's. evaluate() records a snapshot before and after timing and warns (it never
rejects: the candidate is not at fault, and the baselines ran under the same clocks, interleaved).

NVML also keeps cumulative "violation" counters (ns spent clock-limited by power / thermal
policy); their growth between the two snapshots covers the whole timing phase, where the
throttle-reason bitmask is only the state at the instant it was read. Without pynvml the
nvidia-smi query gives the bitmask and clocks only. On a CPU machine both fail: the snapshot is
{"error": ...} and no finding is made.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess

# NVML's nvmlClocksEventReasons / clocks_throttle_reasons bits (nvml.h).
REASON_BITS = {
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
# The reasons that mean "slower than the kernel would otherwise run" (idle/app clocks do not).
HARMFUL = frozenset(
    {
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    }
)
SMI_FIELDS = (
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "temperature.gpu",
    "power.draw",
    "clocks_throttle_reasons.active",
)
# Newer drivers call the same field clocks_event_reasons.active.
_SMI_REASON_FIELDS = ("clocks_throttle_reasons.active", "clocks_event_reasons.active")


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, name in REASON_BITS.items() if mask & bit]


def _num(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_smi(text: str) -> dict:
    """One line of `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(SMI_FIELDS):
        return {"error": f"unexpected nvidia-smi output: {line[:200]!r}"}
    sm, mem, max_sm, temp, power, reasons = parts
    try:
        mask = int(reasons, 16)
    except ValueError:
        return {"error": f"unexpected throttle reasons: {reasons[:60]!r}"}
    return {
        "source": "nvidia-smi",
        "sm_mhz": _num(sm),
        "mem_mhz": _num(mem),
        "max_sm_mhz": _num(max_sm),
        "temperature_c": _num(temp),
        "power_w": _num(power),
        "reasons_mask": mask,
        "reasons": decode_reasons(mask),
    }


def _nvml_snapshot(uuid: str | None) -> dict:
    import pynvml  # nvidia-ml-py; torch.cuda.clock_rate uses it too

    pynvml.nvmlInit()
    try:
        handle = (
            pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(0)
        )
        get_reasons = getattr(
            pynvml,
            "nvmlDeviceGetCurrentClocksEventReasons",
            getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
        )
        if get_reasons is None:
            raise AttributeError("this pynvml has no clock reasons call")
        mask = int(get_reasons(handle))
        snap = {
            "source": "nvml",
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "mem_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "reasons_mask": mask,
            "reasons": decode_reasons(mask),
        }
        for key, policy in (("power", 0), ("thermal", 1)):  # NVML_PERF_POLICY_POWER/THERMAL
            with contextlib.suppress(pynvml.NVMLError):
                snap[f"violation_{key}_ns"] = int(
                    pynvml.nvmlDeviceGetViolationStatus(handle, policy).violationTime
                )
        return snap
    finally:
        pynvml.nvmlShutdown()


def _smi_snapshot(uuid: str | None) -> dict:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return {"error": "neither pynvml nor nvidia-smi is available"}
    last = ""
    for reason_field in _SMI_REASON_FIELDS:
        fields = ",".join((*SMI_FIELDS[:-1], reason_field))
        cmd = [tool, f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
        if uuid:
            cmd += ["-i", uuid]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError) as exc:
            return {"error": f"nvidia-smi: {exc}"[:200]}
        if proc.returncode == 0:
            return parse_smi(proc.stdout)
        last = (proc.stdout + proc.stderr).strip()
    return {"error": f"nvidia-smi: {last[:200]}"}


def snapshot(uuid: str | None = None) -> dict:
    """Clocks, temperature, power and throttle reasons now; {"error": ...} where unavailable."""
    try:
        return _nvml_snapshot(uuid)
    except Exception as exc:  # noqa: BLE001  (no pynvml, no driver, a GPU NVML cannot see)
        snap = _smi_snapshot(uuid)
        if "error" in snap:
            snap["error"] += f" (pynvml: {type(exc).__name__}: {str(exc)[:120]})"
        return snap


def device_uuid() -> str | None:
    """NVML's name for torch's current device ("GPU-..."), so both talk about the same GPU."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    except Exception:  # noqa: BLE001  (older torch, no GPU)
        return None
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def throttle_during(before: dict, after: dict) -> list[str]:
    """The harmful throttle reasons seen in either snapshot or by the violation counters."""
    seen: set[str] = set()
    for snap in (before, after):
        seen |= HARMFUL.intersection(snap.get("reasons") or ())
    for key, reason in (("power", "power_violation"), ("thermal", "thermal_violation")):
        a, b = before.get(f"violation_{key}_ns"), after.get(f"violation_{key}_ns")
        if a is not None and b is not None and b > a:
            seen.add(f"{reason} {(b - a) / 1e6:.1f} ms")
    return sorted(seen)
