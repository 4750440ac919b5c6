"""``python -m edgekit.run SOURCE --bench``: run the harness, print a summary, write the report."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .harness import BenchOptions, bench, default_report_path
from .report import push, summary_rows, to_csv, write_report


def runnable_artifacts(source: str, profile: str) -> list[str]:
    """Every artifact of the package this device has a runtime for, in the profile's order."""
    from ..device.devices import detect, get_profile
    from ..device.package_io import open_package
    from ..device.runtime import runnable

    _, manifest = open_package(source)
    chosen = detect() if profile == "auto" else get_profile(profile)
    return list(dict.fromkeys(artifact.key for artifact, _ in runnable(manifest, chosen)))


def run_bench(args: argparse.Namespace) -> int:
    from .card import SINGLE_STREAM_QUERIES, SINGLE_STREAM_SECONDS

    runs, min_seconds = args.runs, args.min_seconds
    if args.single_stream:
        runs, min_seconds = max(runs, SINGLE_STREAM_QUERIES), max(min_seconds, SINGLE_STREAM_SECONDS)
    options = BenchOptions(
        runs=runs, warmup=args.warmup, min_seconds=min_seconds, threads=args.threads, batch=args.batch,
        artifact=args.artifact, backend=args.backend, profile=args.profile,
        input=str(args.inputs[0]) if args.inputs else None, eval=args.eval, cv_warn=args.cv_warn,
        sweep_threads=args.sweep_threads or [], sweep_batches=args.sweep_batch or [], device_name=args.device_name,
        require_signature=args.require_signature, trusted_keys=args.trusted_keys,
        sustained_s=args.sustained, window_s=args.window, launch=not args.no_launch,
        single_stream=args.single_stream,
    )
    from ..fsutil import ensure_writable

    report_path = args.report or (args.card / default_report_path(args.source) if args.card is not None
                                  else default_report_path(args.source))  # a card's report beside its cards
    for path, what in ((report_path, "report"), (args.csv, "CSV")):
        if path is not None:
            ensure_writable(path, what)  # before measuring for minutes
    if args.card is not None:
        ensure_writable(args.card, "card folder", is_dir=True)
    check_store_options(args)
    artifacts = None
    if args.sweep and not args.artifact:
        artifacts = runnable_artifacts(args.source, args.profile)
    elif args.card is not None:
        artifacts = card_artifacts(args.source, args.profile, args.artifact)
    report = bench(args.source, options, artifacts)
    path = write_report(report, report_path).resolve()
    if args.card is not None:
        write_cards(args.source, report, args.card, args.sign if args.store else None, args.store)
    if args.csv:
        from ..fsutil import write_text_atomic

        write_text_atomic(args.csv, to_csv([report]))
    print_summary(report)
    for warning in report["warnings"]:
        print(f"WARNING: {warning}", file=sys.stderr)
    print(f"report: {path}")
    if args.push:
        status = push(report, args.push)
        print(f"pushed to {args.push} (HTTP {status})")
    fallbacks = fallback_reasons(report)
    if args.fail_on_fallback and fallbacks:
        for reason in fallbacks:
            print(f"error: fallback: {reason}", file=sys.stderr)
        print("hint: install the runtime build with that accelerator, or check the device profile's delegate / "
              "providers; the report's placement section lists the ops", file=sys.stderr)
        return FALLBACK_EXIT
    return 0


FALLBACK_EXIT = 3


def card_artifacts(source: str, profile: str, asked: str | None = None) -> list[str] | None:
    """The artifact this device runs first (or the one ``--artifact`` names) and its float
    fallback (the card's speed-up), where the device has a runtime for it; None: ``asked`` alone
    (a package without a manifest's choices, or a name the bench resolves and refuses itself)."""
    from ..device.devices import detect, get_profile
    from ..device.package_io import open_package
    from ..device.runtime import choose
    from ..errors import EdgekitError
    from .card import float_fallbacks

    runnable = runnable_artifacts(source, profile)
    if not runnable:
        return None if asked else []
    _, manifest = open_package(source)
    first = runnable[0]
    if asked:
        try:
            first = choose(manifest, detect() if profile == "auto" else get_profile(profile), asked)[0].key
        except EdgekitError:
            return None
    fallback = [key for key in float_fallbacks(manifest, first) if key in runnable]
    return [first, *fallback[:1]]


def check_store_options(args: argparse.Namespace) -> None:
    """``--store`` and ``--sign`` refused before measuring for minutes when they cannot be honoured."""
    from ..errors import InputError

    if args.store and args.card is None:
        raise InputError("--store stores latency cards: it needs --card DIR (or use `edgekit card`)")
    if args.sign is not None and not args.store:
        raise InputError("--sign signs the package after --store adds the cards to it", hint="add --store")
    if args.store:
        from ..device.package_io import is_url, open_package
        from ..device.signing import SIGNATURE_NAME, check_private_key

        if is_url(args.source):
            raise InputError(f"--store rewrites the package, and {args.source} is a URL",
                             hint="download the package and measure the local copy")
        if args.sign is not None:
            check_private_key(args.sign)
        elif (open_package(args.source)[0] / SIGNATURE_NAME).is_file():
            raise InputError(f"package {args.source} is signed: storing a card changes its manifest, which would void "
                             "the signature", hint="pass --sign KEY to sign it again (devices must trust that key)")


def write_cards(source: str, report: dict[str, Any], folder: Any, key: Any = None, store: bool = False) -> None:
    """One latency card per quantized artifact of ``report`` into ``folder`` (and, ``store``, into
    the package, signed again with ``key``); their paths printed."""
    from ..device.package_io import open_package
    from .card import cards_from_report, write_card

    _, manifest = open_package(source)
    cards = cards_from_report(report, manifest)
    for card in cards:
        json_path, md_path = write_card(card, folder)
        print(f"card: {md_path} ({json_path.name})")
    if store:
        from .package_cards import store_cards

        for line in store_cards(source, cards, key):
            print(f"stored {line} in {source}")


def fallback_reasons(report: dict[str, Any]) -> list[str]:
    """One line per configuration whose requested accelerator did not take its ops."""
    from ..formats.placement import fell_back

    found = []
    for result in report["results"]:
        reason = fell_back(result.get("placement") or {})
        if reason:
            config = result["config"]
            found.append(f"{config['artifact']}/{config['backend']} t{config['threads']}: {reason}")
    return found


def print_summary(report: dict[str, Any]) -> None:
    device = report["device"]
    print(f"{report['model']['name']} on {device['name']} ({device['arch']}, {device['cpu']['model']}, "
          f"{device['cores']} cores, profile {device.get('profile')})")
    rows = summary_rows(report)
    # columns as wide as their longest entry: artifact keys run from "onnx" to "tflite-float16"
    aw = max([len("artifact"), *(len(str(r["artifact"])) for r in rows)])
    bw = max([len("backend"), *(len(str(r["backend"])) for r in rows)])
    header = f"{'artifact':<{aw}} {'backend':<{bw}} {'thr':>3} {'batch':>5} {'p50 ms':>9} {'p90 ms':>9} {'p99 ms':>9} " \
             f"{'p50 95% CI':>19} {'spread':>6} {'per s':>9} {'RSS MiB':>8}"
    print(header)
    for row, result in zip(rows, report["results"]):
        ci = result["latency"].get("p50_ci95")
        ci_text = f"{ci[0]:.3f}-{ci[1]:.3f}" if ci else "n/a"
        print(f"{row['artifact']:<{aw}} {row['backend']:<{bw}} {row['threads']!s:>3} {row['batch']:>5} {row['p50_ms']:>9.3f} "
              f"{row['p90_ms']:>9.3f} {row['p99_ms']:>9.3f} {ci_text:>19} {row['spread']:>6.1%} "
              f"{row['throughput_per_s']:>9.1f} {row['peak_rss_mib']:>8.1f}")
        e2e = result.get("end_to_end")
        if e2e:
            print(f"{'':<{aw}} end to end p50: preprocess {e2e['preprocess']['p50_ms']:.3f} + invoke "
                  f"{e2e['invoke']['p50_ms']:.3f} + postprocess {e2e['postprocess']['p50_ms']:.3f} = "
                  f"{e2e['total']['p50_ms']:.3f} ms (model only {row['p50_ms']:.3f} ms)")
        acc = (result.get("accuracy") or {}).get("accuracy")
        if acc is not None:
            print(f"{'':<{aw}} accuracy on device: {100 * acc:.2f}% ({result['accuracy']['samples']} samples)")
    for row, result in zip(rows, report["results"]):
        _print_extras(row, result)
    print_context(report)
    if report["thermal"]["throttled"]:
        print("THROTTLED during this run: " + "; ".join(report["thermal"]["reasons"]))


def _print_extras(row: dict[str, Any], result: dict[str, Any]) -> None:
    """Launch, first inference, placement and the sustained verdict of one configuration."""
    from .sustained import first_to_last

    name = f"{row['artifact']}/{row['backend']} t{row['threads']}"
    launch = result.get("launch") or {}
    first, again = launch.get("first_launch") or {}, launch.get("relaunch") or {}
    if "process_ms" in first:
        print(f"{name}: first launch {first['process_ms']:.0f} ms to the first result (empty cache), relaunch "
              f"{again.get('process_ms', float('nan')):.0f} ms (warm cache); in this process: load "
              f"{result['load_ms'].get('total_s', 0):.1f} ms, first inference {result['first_inference_ms']:.2f} ms")
    placement = result.get("placement") or {}
    if placement.get("by_target"):
        where = ", ".join(f"{target} {count}" for target, count in placement["by_target"].items())
        print(f"{name}: ops by where they ran: {where}" + (
            f" (fallback: {placement['fallback_ops']} ops)" if placement.get("fallback_ops") else ""))
    sustained = result.get("sustained") or {}
    if sustained.get("first"):
        verdict = sustained["verdict"]
        print(f"{name}: sustained {sustained['duration_s']:.0f} s: {first_to_last(sustained)}: {verdict['verdict']} "
              f"({verdict['reason']})")


def print_context(report: dict[str, Any]) -> None:
    """The conditions line: what a reader needs to trust (or not) the figures above."""
    conditions = (report.get("context") or {}).get("conditions") or {}
    parts = []
    for key, label in (("governor", "governor"), ("power_source", "power"), ("power_mode", "power mode")):
        if conditions.get(key):
            parts.append(f"{label} {conditions[key]}")
    if conditions.get("max_c") is not None:
        parts.append(f"hottest zone {conditions['max_c']:.0f} °C")
    if conditions.get("other_cores") is not None:
        parts.append(f"other processes {conditions['other_cores']:.2f} cores")
    from .context import unreadable_signals

    unread = unreadable_signals(report.get("context") or {})
    print("conditions: " + (", ".join(parts) or "none readable") + (f"; not readable here: {', '.join(unread)}"
                                                                      if unread else ""))
