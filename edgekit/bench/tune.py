"""Measured choice on the device: ``edgekit tune PACKAGE`` (``python -m edgekit.run PACKAGE --tune``).

INT8 is not faster everywhere (x86 CPUs without VNNI often run float faster), and thread
counts matter as much. Tuning benchmarks every artifact x backend x thread count this device
can run, among the artifacts that passed the package's accuracy gates, interleaved, with the
benchmark harness's statistics. The fastest wins only when it is significantly faster than
what ``load`` picks untuned (the whole bootstrap confidence interval of the ratio of medians
below 1); otherwise the untuned choice stays. The decision is kept in the cache under the
digest of the package's manifest, with the identities of the device and of the installed
runtime libraries it was measured with (``edgekit.device.tuned``): ``load`` uses it when nothing else
is asked for, and ignores it (saying so at ``-v``) when the package, the device or a runtime changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..device.devices import DeviceFacts, Profile, check_threads
from ..errors import EdgekitError
from ..manifest import Manifest
from ..device.tuned import Choice, store, tuned_choice

SIGNIFICANT = 0.95  # the fastest must be faster than this ratio of the default's median, at 95% confidence


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to the cores this process may use, and that count itself."""
    counts, n = [], 1
    while n < cores:
        counts.append(n)
        n *= 2
    return sorted(set(counts) | {max(cores, 1)})


def passed_gates(manifest: Manifest, key: str) -> bool:
    """Whether the package's validation let this artifact through (unmeasured ones count as
    passed only when nothing failed: the packager refuses failed ones unless told otherwise)."""
    return not manifest.validation.artifact(key).failed


def candidates(manifest: Manifest, profile: Profile, threads: list[int],
               artifacts: list[str] | None = None, include_failed: bool = False) -> list[Choice]:
    """Every runnable (artifact, backend) pair that passed the gates in the arithmetic this device
    runs it with (among ``artifacts``, when given; failed ones too with ``include_failed``), at
    every thread count."""
    from ..device.runtime import runnable, verdict_holds_here

    if artifacts:
        artifacts = [manifest.artifact(name).key for name in artifacts]  # unknown names: a clear error
    # a build judged for other devices' arithmetic is no candidate where this CPU's kernels saturate on
    # it (fast, but not what was validated)
    pairs = [(a.key, b.name) for a, b in runnable(manifest, profile)
             if (include_failed or (passed_gates(manifest, a.key) and verdict_holds_here(manifest, a.key, b.name)))
             and (not artifacts or a.key in artifacts)]
    return [Choice(a, b, t) for a, b in dict.fromkeys(pairs) for t in threads]


def decide(default: Choice, medians_ms: dict[Choice, float], samples_s: dict[Choice, list[float]]) -> tuple[Choice, dict]:
    """The fastest choice when significantly faster than ``default``, else ``default``."""
    from .stats import bootstrap_ratio

    fastest = min(medians_ms, key=medians_ms.__getitem__)
    if fastest == default or default not in samples_s:
        return fastest, {"ratio": 1.0 if fastest == default else None, "reason": "fastest measured"}
    import numpy as np

    ratio = bootstrap_ratio(np.asarray(samples_s[default]), np.asarray(samples_s[fastest]))
    if ratio["ci_high"] < SIGNIFICANT:
        return fastest, ratio | {"reason": f"{ratio['ratio']:.2f}x the default's median latency "
                                           f"(95% CI {interval(ratio['ci_low'], ratio['ci_high'])})"}
    return default, ratio | {"reason": f"the fastest ({fastest.describe()}) is not significantly faster than the "
                                       f"default (ratio {ratio['ratio']:.2f}, 95% CI "
                                       f"{interval(ratio['ci_low'], ratio['ci_high'])}): the default stays"}


def interval(low: float, high: float) -> str:
    """``low-high`` with as many decimals as show the interval's width (two at least, five at
    most): a narrow interval of many samples printed as "0.50-0.50" looked like no interval."""
    for decimals in range(2, 6):
        if f"{low:.{decimals}f}" != f"{high:.{decimals}f}":
            break
    return f"{low:.{decimals}f}-{high:.{decimals}f}"


def tune(source: str, runs: int = 60, min_seconds: float = 1.0, threads: list[int] | None = None,
         profile: str = "auto", save: bool = True, artifacts: list[str] | None = None,
         include_failed: bool = False) -> dict[str, Any]:
    """Measure every candidate on this device (``artifacts``: only these), decide, store the
    decision; the bench report with a ``tuning`` section (decision, default, every candidate's median).
    ``include_failed`` also measures artifacts that failed the package's gates: for speed studies
    of models whose accuracy is not the point (benchmarks with random weights), never for use."""
    from .harness import BenchOptions, bench
    from ..device.package_io import open_package
    from ..device.devices import resolve_profile
    from ..device.runtime import choose, default_threads

    facts = DeviceFacts.read()
    chosen_profile = resolve_profile(profile, facts)
    root, manifest = open_package(source)
    counts = [check_threads(t, "--tune-threads", facts.cpu_count) for t in threads] if threads else \
        thread_counts(facts.cpu_count)
    found = candidates(manifest, chosen_profile, counts, artifacts, include_failed)
    if not found:
        if candidates(manifest, chosen_profile, counts, artifacts, True):  # it runs here: its gates failed
            raise EdgekitError(f"every artifact of package {manifest.name!r} this device runs failed its accuracy "
                               "gates at packaging: there is nothing correct to tune between",
                               hint="repackage it so that an artifact passes (the search is on by default; more "
                                    "representative calibration data, --also-float for a float artifact)")
        raise EdgekitError(f"nothing in package {manifest.name!r} can run here and passed its accuracy gates",
                           hint="install the runtime for one of its formats (edgekit[tflite] or edgekit[onnx])")
    entry, backend_cls = choose(manifest, chosen_profile)  # what load picks untuned
    # The untuned default is always measured, whatever --tune-artifacts/--tune-threads ask for:
    # a choice is stored only when it beats what every run would do without it.
    default = Choice(entry.key, backend_cls.name, default_threads(chosen_profile))
    if default not in found:
        found.append(default)
    options = BenchOptions(runs=runs, warmup=5, min_seconds=min_seconds, profile=profile, launch=False,
                           placement=False)  # choosing the fastest: steady state only
    report = bench(str(root), options, choices=[(c.artifact, c.backend, c.threads) for c in found])
    samples = {c: [ms / 1e3 for ms in r["latency"]["samples_ms"]] for r, c in zip(report["results"], found)}
    medians = {c: float(r["latency"]["p50"]) for r, c in zip(report["results"], found)}  # the harness's summary
    decision, evidence = decide(default, medians, samples)
    measured = {"default": default._asdict(), "evidence": evidence,
                "candidates": [c._asdict() | {"p50_ms": round(medians[c], 4)} for c in sorted(medians, key=medians.get)]}
    report["tuning"] = {"decision": decision._asdict(), **measured}
    if save:
        report["tuning"]["stored"] = str(store(root, facts, decision, measured))
    return report


# --- command-line helpers -------------------------------------------------------------------------


def resolve_package(source: str) -> tuple[Path, Manifest]:
    """A package directory, ``.ekpkg`` or URL as its unpacked root and manifest (tuning needs a
    package: a bare .tflite/.onnx has nothing to choose between)."""
    from ..formats import format_for_file
    from ..device.package_io import local_path, open_package

    path = local_path(source)
    if path.is_file() and format_for_file(path) is not None:
        raise EdgekitError(f"{source} is a single model file: there is nothing to tune between",
                           hint="package it (edgekit package ... --also-float) and tune the package")
    return open_package(path)


def tuned_for(root: Path, manifest: Manifest, profile: str = "auto") -> Choice | None:
    """The tuned choice ``load`` would use for this package here (None: none, stale, or the
    profile ignores tuned choices)."""
    from ..device.devices import resolve_profile

    facts = DeviceFacts.read()
    return tuned_choice(root, manifest, facts) if resolve_profile(profile, facts).use_tuned else None


def print_tuning(report: dict[str, Any]) -> None:
    """Every candidate's median, fastest first, and the decision with its evidence."""
    import sys

    tuning = report["tuning"]
    default = Choice(**tuning["default"])
    decided = Choice(**tuning["decision"])
    print(f"{'artifact':<18} {'backend':<12} {'threads':>7} {'p50 ms':>10}", file=sys.stderr)
    for row in tuning["candidates"]:
        choice = Choice(row["artifact"], row["backend"], row["threads"])
        mark = " <- chosen" if choice == decided else (" (untuned default)" if choice == default else "")
        print(f"{choice.artifact:<18} {choice.backend:<12} {choice.threads:>7} {row['p50_ms']:>10.3f}{mark}",
              file=sys.stderr)
    print(f"tuned: {decided.describe()} ({tuning['evidence']['reason']})"
          + (f"; stored in {tuning['stored']}" if tuning.get("stored") else ""), file=sys.stderr)
