"""This machine: ``edgekit profiles`` (which device profile matches and why, the formats and
runtimes here) and ``edgekit cache`` (the local cache)."""

from __future__ import annotations

import argparse
from typing import Any

from .commands import command, group


def show_profiles(args: argparse.Namespace) -> None:
    root = args.root

    from ..device.devices import DeviceFacts, detect, load_profiles, profile_dirs
    from ..formats import FORMATS

    facts = DeviceFacts.read(root)
    profiles = load_profiles()
    chosen = detect(facts, profiles)
    runs_here = [said for f in FORMATS.values() if (said := f.device_rules.describe_device(facts))]
    print(f"this machine: {facts.os}/{facts.arch}, {facts.cpu_count} cores, "
               f"device-tree model {facts.device_tree_model or '(none)'}, "
               f"Jetson {'yes' if facts.nv_tegra_release else 'no'}, NVIDIA driver {'yes' if facts.cuda else 'no'}"
               + "".join(f", {said}" for said in runs_here))
    for profile in sorted(profiles.values(), key=lambda p: (-p.priority, p.name)):
        matched, reasons = profile.match(facts)
        mark = "*" if profile.name == chosen.name else ("+" if matched else " ")
        prefer = ", ".join(f"{a}/{b}" for a, b in profile.prefer)
        print(f"{mark} {profile.name:<18} priority {profile.priority:<3} {profile.description}")
        builds = "".join(f"{name} builds {', '.join(b)}; " for name, b in profile.quantization.items())
        print(f"    prefers {prefer}; threads {profile.threads or 'all'}; {builds}{profile.path}")
        for reason in reasons:
            print(f"    {reason}")
    print(f"selected: {chosen.name}" + ("" if chosen.name in profiles else f" ({chosen.description})"))
    print("profiles are read from: " + ", ".join(str(d) for d in profile_dirs()))

    print("formats:")
    for fmt in FORMATS.values():
        runtimes = ", ".join(f"{b.name} ({b.available() or 'not installed: ' + fmt.extra})" for b in fmt.backends)
        print(f"  {fmt.name:<8} {fmt.description}; runs on {runtimes}")


def add_cache(commands: Any) -> None:
    cache_commands = group(commands, "cache", "inspect and manage the local cache (EDGEKIT_CACHE_DIR)")
    command(cache_commands, "ls", _cache_ls, "list cache entries, least recently used first")
    command(cache_commands, "verify", _cache_verify,
            "check every entry's checksums; remove the ones that fail (they are rebuilt on next use)")
    command(cache_commands, "clear", _cache_clear, "remove every cache entry")


def _cache_ls(args: argparse.Namespace) -> None:
    import time

    from ..machine import cache

    found = sorted(cache.entries(), key=lambda e: e.last_used)
    for entry in found:
        age = time.time() - entry.last_used
        print(f"{entry.kind:<9} {entry.key[:40]:<40} {entry.bytes / 1024:>10.1f} KiB  used {age / 60:.0f} min ago")
    total = sum(e.bytes for e in found)
    print(f"{len(found)} entries, {total / (1 << 20):.1f} MiB of {cache.max_bytes() / (1 << 20):.0f} MiB "
          f"in {cache.cache_root()}")


def _cache_verify(args: argparse.Namespace) -> None:
    from ..device.cache_verify import verify_all
    from ..device.profile_store import CACHE_NAME, verify_cache

    bad = [(f"{entry.kind}/{entry.key}", problem) for entry, problem in verify_all()]
    profiles = verify_cache()
    bad += [(CACHE_NAME, profiles)] if profiles else []
    for name, problem in bad:
        print(f"removed {name}: {problem}")
    print(f"{len(bad)} bad entries removed" if bad else "all entries verified")


def _cache_clear(args: argparse.Namespace) -> None:
    from ..machine import cache

    print(f"removed {cache.clear()} entries from {cache.cache_root()}")
