"""Fingerprint and thermal readers against faked /proc, /sys and vendor tools."""

from __future__ import annotations

import os
import stat

import pytest

from edgekit.bench.fingerprint import decode_throttled, fingerprint, thermal_state, throttled_during

PI_CPUINFO = """processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm crc32 cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU part\t: 0xd0b

Hardware\t: BCM2835
Model\t\t: Raspberry Pi 5 Model B Rev 1.0
"""


def fake_pi(root, temps=(51200, 48000)):
    (root / "proc/device-tree").mkdir(parents=True)
    (root / "proc/device-tree/model").write_bytes(b"Raspberry Pi 5 Model B Rev 1.0\x00")
    (root / "proc/cpuinfo").write_text(PI_CPUINFO)
    (root / "proc/meminfo").write_text("MemTotal:        8245532 kB\nMemFree:  100 kB\n")
    freq = root / "sys/devices/system/cpu/cpu0/cpufreq"
    freq.mkdir(parents=True)
    (freq / "scaling_governor").write_text("ondemand\n")
    (freq / "scaling_cur_freq").write_text("1500000\n")
    (freq / "cpuinfo_max_freq").write_text("2400000\n")
    for i, temp in enumerate(temps):
        zone = root / f"sys/class/thermal/thermal_zone{i}"
        zone.mkdir(parents=True)
        (zone / "type").write_text(f"cpu-thermal{i}\n")
        (zone / "temp").write_text(f"{temp}\n")
    return root


def fake_tool(path, script):
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def pi(tmp_path, monkeypatch):
    root = fake_pi(tmp_path / "root")
    monkeypatch.setenv("EDGEKIT_SYSROOT", str(root))
    tool = fake_tool(tmp_path / "vcgencmd", 'case "$1" in get_throttled) echo "throttled=0x50005";; '
                                            "measure_temp) echo \"temp=71.2'C\";; esac\n")
    monkeypatch.setenv("EDGEKIT_VCGENCMD", str(tool))
    monkeypatch.setenv("EDGEKIT_NVPMODEL", str(tmp_path / "missing-nvpmodel"))
    return root


def test_throttled_flags_are_decoded():
    decoded = decode_throttled(0x50005)
    assert decoded["flags"] == ["under-voltage detected", "currently throttled", "under-voltage has occurred",
                                "throttling has occurred"]
    assert decoded["throttling_now"] and decoded["throttled_since_boot"]
    calm = decode_throttled(0x0)
    assert calm["flags"] == [] and not calm["throttling_now"]


def test_raspberry_pi_fingerprint_and_thermal_state(pi):
    state = thermal_state()
    assert state["zones_c"] == {"cpu-thermal0": 51.2, "cpu-thermal1": 48.0} and state["max_c"] == 51.2
    assert state["raspberry_pi"]["soc_temp_c"] == 71.2
    assert state["raspberry_pi"]["throttling_now"] is True
    info = fingerprint(profile="rpi5")
    assert info["cpu"]["model"] == "Raspberry Pi 5 Model B Rev 1.0"
    assert info["cpu"]["simd"] == ["asimd", "asimddp"]
    assert info["cpu"]["governor"] == "ondemand"
    assert info["cpu"]["cur_freq_mhz"] == 1500 and info["cpu"]["max_freq_mhz"] == 2400
    assert info["memory_mib"] == pytest.approx(8052.3, abs=0.1)
    assert info["device_model"] == "Raspberry Pi 5 Model B Rev 1.0"
    assert info["profile"] == "rpi5"


def test_a_run_is_marked_throttled(pi, tmp_path):
    before = {"zones_c": {}, "max_c": 50.0, "raspberry_pi": decode_throttled(0x0)}
    after = {"zones_c": {}, "max_c": 83.5, "raspberry_pi": decode_throttled(0x40000)}
    reasons = throttled_during(before, after)
    assert "Raspberry Pi throttled during the run" in reasons
    assert any("83.5 °C" in r for r in reasons)
    assert throttled_during({"max_c": 40.0}, {"max_c": 41.0}) == []


def test_jetson_power_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_SYSROOT", str(tmp_path))
    monkeypatch.setenv("EDGEKIT_VCGENCMD", str(tmp_path / "none"))
    tool = fake_tool(tmp_path / "nvpmodel", 'echo "NV Power Mode: MAXN_SUPER"; echo 2\n')
    monkeypatch.setenv("EDGEKIT_NVPMODEL", str(tool))
    assert thermal_state()["jetson"] == {"power_mode": "MAXN_SUPER"}


def test_missing_files_and_tools_are_just_absent(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_SYSROOT", str(tmp_path))
    monkeypatch.setenv("EDGEKIT_VCGENCMD", str(tmp_path / "none"))
    monkeypatch.setenv("EDGEKIT_NVPMODEL", str(tmp_path / "none"))
    state = thermal_state()
    assert state == {"zones_c": {}, "max_c": None}
    info = fingerprint()
    assert info["cpu"]["governor"] is None and info["memory_mib"] is None
    assert os.uname().sysname in info["os"]
