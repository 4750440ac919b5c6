"""Run-context readers against faked sysfs/procfs trees: a Raspberry Pi, a Jetson, a generic
Linux laptop, and a machine that exposes nothing (what this VM and CI look like)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgekit.bench import context
from edgekit.bench.context import load
from tests.bench.test_fingerprint import fake_tool


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def cpufreq(root: Path, policy: int, cpus: str, governor: str, cur: int, low: int, high: int, hw_high: int) -> None:
    base = f"sys/devices/system/cpu/cpufreq/policy{policy}"
    for name, value in (("related_cpus", cpus), ("scaling_governor", governor), ("scaling_cur_freq", cur),
                        ("scaling_min_freq", low), ("scaling_max_freq", high), ("cpuinfo_min_freq", low),
                        ("cpuinfo_max_freq", hw_high)):
        write(root, f"{base}/{name}", f"{value}\n")


def zone(root: Path, index: int, kind: str, millidegrees: int) -> None:
    write(root, f"sys/class/thermal/thermal_zone{index}/type", kind + "\n")
    write(root, f"sys/class/thermal/thermal_zone{index}/temp", f"{millidegrees}\n")


def proc(root: Path, busy: int = 1000, idle: int = 9000) -> None:
    write(root, "proc/loadavg", "0.52 0.40 0.33 2/311 4242\n")
    write(root, "proc/stat", f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 {busy} 0 0 {idle} 0 0 0 0 0 0\n")


@pytest.fixture
def sysroot(tmp_path, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv("EDGEKIT_SYSROOT", str(root))
    monkeypatch.setenv("EDGEKIT_VCGENCMD", str(tmp_path / "no-vcgencmd"))
    monkeypatch.setenv("EDGEKIT_NVPMODEL", str(tmp_path / "no-nvpmodel"))
    return root


def test_raspberry_pi_tree(sysroot):
    cpufreq(sysroot, 0, "0 1 2 3", "ondemand", 1500000, 1500000, 2400000, 2400000)
    zone(sysroot, 0, "cpu-thermal", 82500)
    write(sysroot, "sys/devices/platform/soc/soc:firmware/get_throttled", "50005\n")
    proc(sysroot)
    static = context.static_context()
    assert static["cpu_frequency"]["governor"] == "ondemand" and static["cpu_frequency"]["capped_cpus"] == []
    pi = static["raspberry_pi"]["throttled_at_start"]
    assert pi["from"].endswith("get_throttled") and pi["throttling_now"] and pi["under_voltage"]
    assert "unreadable" in static["jetson"] and "unreadable" in static["power"]
    before = context.snapshot()
    after = context.snapshot()
    assert after["cpu_mhz"] == {"0 1 2 3": 1500.0} and after["max_c"] == 82.5
    assert after["load_average"] == [0.52, 0.40, 0.33]
    usage = context.during(before, after)
    conditions = context.conditions(static, before, after, usage)
    assert conditions["throttled"] is True and conditions["under_voltage"] is True
    assert any("currently throttled" in r for r in conditions["throttle_reasons"])
    assert any("82.5 °C" in r for r in conditions["throttle_reasons"])


def test_raspberry_pi_flags_from_vcgencmd_when_sysfs_lacks_them(sysroot, tmp_path, monkeypatch):
    tool = fake_tool(tmp_path / "vcgencmd", 'case "$1" in get_throttled) echo "throttled=0x0";; '
                                            "measure_temp) echo \"temp=48.3'C\";; esac\n")
    monkeypatch.setenv("EDGEKIT_VCGENCMD", str(tool))
    pi = context.static_context()["raspberry_pi"]["throttled_at_start"]
    assert pi["from"] == "vcgencmd get_throttled" and pi["soc_temp_c"] == 48.3 and not pi["throttling_now"]


def test_jetson_tree(sysroot):
    cpufreq(sysroot, 0, "0-5", "schedutil", 1510400, 115200, 1510400, 1728000)  # capped by the power mode
    zone(sysroot, 0, "cpu-thermal", 47000)
    zone(sysroot, 1, "gpu-thermal", 45500)
    write(sysroot, "var/lib/nvpmodel/status", "pmode:0002 fmode:quiet\n")
    write(sysroot, "etc/nvpmodel.conf", "< POWER_MODEL ID=0 NAME=MAXN >\n< POWER_MODEL ID=2 NAME=15W >\n")
    gpu = "sys/class/devfreq/17000000.ga10b"
    for name, value in (("cur_freq", 612000000), ("min_freq", 306000000), ("max_freq", 612000000),
                        ("governor", "nvhost_podgov")):
        write(sysroot, f"{gpu}/{name}", f"{value}\n")
    proc(sysroot)
    static = context.static_context()
    assert static["jetson"]["power_mode"] == {"id": 2, "name": "15W", "from": "var/lib/nvpmodel/status"}
    assert static["accelerator_clocks"]["17000000.ga10b"] == {"cur_mhz": 612.0, "min_mhz": 306.0, "max_mhz": 612.0,
                                                             "governor": "nvhost_podgov"}
    assert static["cpu_frequency"]["capped_cpus"] == ["0-5"]
    snap = context.snapshot()
    assert snap["zones_c"] == {"cpu-thermal": 47.0, "gpu-thermal": 45.5} and snap["accelerator_mhz"]["17000000.ga10b"]
    conditions = context.conditions(static, snap, snap, context.during(snap, snap))
    assert conditions["power_mode"] == "15W" and conditions["capped"] is True and conditions["throttled"] is False


def test_generic_linux_laptop_on_battery(sysroot):
    cpufreq(sysroot, 0, "0-3", "powersave", 800000, 400000, 3000000, 3000000)
    cpufreq(sysroot, 4, "4-7", "powersave", 1200000, 400000, 3600000, 3600000)
    zone(sysroot, 0, "x86_pkg_temp", 61000)
    write(sysroot, "sys/class/power_supply/AC/type", "Mains\n")
    write(sysroot, "sys/class/power_supply/AC/online", "0\n")
    write(sysroot, "sys/class/power_supply/BAT0/type", "Battery\n")
    write(sysroot, "sys/class/power_supply/BAT0/status", "Discharging\n")
    write(sysroot, "sys/class/power_supply/BAT0/capacity", "64\n")
    proc(sysroot)
    static = context.static_context()
    assert [p["cpus"] for p in static["cpu_frequency"]["policies"]] == ["0-3", "4-7"]
    assert static["power"]["source"] == "battery" and static["power"]["batteries"][0]["capacity_pct"] == 64
    assert "unreadable" in static["raspberry_pi"] and "unreadable" in static["accelerator_clocks"]
    snap = context.snapshot()
    assert snap["cpu_mhz"] == {"0-3": 800.0, "4-7": 1200.0}
    conditions = context.conditions(static, snap, snap, context.during(snap, snap))
    assert conditions["power_source"] == "battery" and conditions["governor"] == "powersave"
    assert conditions["throttled"] is False


def test_a_machine_that_exposes_nothing_says_so(sysroot):
    static = context.static_context()
    for signal in ("cpu_frequency", "power", "raspberry_pi", "jetson", "accelerator_clocks"):
        assert "unreadable" in static[signal], signal
    assert "governor and frequency unknown" in static["cpu_frequency"]["unreadable"]
    # said in the report; in the summary only what this device could have exposed (it is no Pi or Jetson)
    assert context.unreadable_signals(static) == ["cpu frequency", "power", "accelerator clocks"]
    snap = context.snapshot()
    assert snap["zones_c"] == {} and snap["max_c"] is None and snap["cpu_mhz"] is None and snap["counters"] is None
    usage = context.during(snap, snap)
    assert "unreadable" in usage
    conditions = context.conditions(static, snap, snap, usage)
    assert conditions["throttled"] is None and conditions["other_cores"] is None and conditions["governor"] is None


def test_other_processes_cpu_use_is_the_machine_busy_time_minus_our_own():
    before = {"busy_s": 100.0, "total_s": 1000.0, "steal_s": 0.0, "self_s": 5.0, "wall_s": 50.0}
    after = {"busy_s": 130.0, "total_s": 1040.0, "steal_s": 2.0, "self_s": 15.0, "wall_s": 70.0}
    usage = load.usage_between(before, after)
    assert usage["other_cores"] == 1.0 and usage["other_share"] == 0.5 and usage["steal_share"] == 0.05
    assert usage["cores_seen"] == 2.0
    assert load.usage_between(after, before) is None  # time went backwards: no figure rather than a wrong one
