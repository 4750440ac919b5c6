"""Whether two reports were taken under the same conditions, said in words for ``edgekit compare``.

Two latency figures compare devices only when nothing else differs: a throttled run against
a cool one, ``powersave`` against ``performance``, a run sharing its cores with another
process against an idle one, battery against mains, a Jetson at 15 W against MAXN, or another
runtime version. Each report is checked against the baseline report; a report that slowed
down over its own sustained run is named too. A signal that could not be read is named once,
as unknown, rather than taken as "the same".
"""

from __future__ import annotations

from typing import Any

LOAD_GAP_CORES = 0.25  # other processes' CPU use differing by a quarter core or more


def report_conditions(report: dict[str, Any]) -> dict[str, Any]:
    return ((report.get("context") or {}).get("conditions")) or {}


def _label(name: str, report: dict[str, Any]) -> str:
    device = (report.get("device") or {}).get("name", "?")
    return device if name in (device, f"{device}.bench") else f"{device} ({name})"


def _pair(a: str, ca: dict[str, Any], b: str, cb: dict[str, Any]) -> list[str]:
    found = []
    if ca.get("throttled") is not None and cb.get("throttled") is not None and ca["throttled"] != cb["throttled"]:
        hot, cool, why = (a, b, ca) if ca["throttled"] else (b, a, cb)
        found.append(f"{hot} was throttled during its run ({'; '.join(why.get('throttle_reasons') or []) or 'flags'}) "
                     f"and {cool} was not: {hot}'s figures are its throttled speed")
    for key, what in (("governor", "CPU governor"), ("power_source", "power source"), ("power_mode", "power mode")):
        if ca.get(key) and cb.get(key) and ca[key] != cb[key]:
            found.append(f"{a} ran with {what} {ca[key]}, {b} with {cb[key]}: the difference is partly the setting")
    if ca.get("capped") is not None and cb.get("capped") is not None and ca["capped"] != cb["capped"]:
        capped = a if ca["capped"] else b
        found.append(f"{capped}'s CPU frequency was capped below its hardware maximum (scaling_max_freq)")
    pa, pb = ca.get("cpus_allowed"), cb.get("cpus_allowed")
    if pa is not None and pb is not None and pa != pb:
        fewer, more, fewer_c, more_c = (a, b, ca, cb) if pa < pb else (b, a, cb, ca)
        found.append(f"{fewer} ran on {fewer_c['cpus_allowed']} CPU(s) of {fewer_c.get('cpus_online') or '?'} (pinned: "
                     f"taskset or a cpuset), {more} on {more_c['cpus_allowed']}: with threads above "
                     f"{fewer_c['cpus_allowed']}, {fewer}'s latency includes that pinning")
    oa, ob = ca.get("other_cores"), cb.get("other_cores")
    if oa is not None and ob is not None and (abs(oa - ob) >= LOAD_GAP_CORES or bool(ca.get("shared")) != bool(cb.get("shared"))):
        busy, idle, busy_c, idle_c = (a, b, ca, cb) if oa > ob else (b, a, cb, ca)
        found.append(f"{busy} ran while other processes used {busy_c['other_cores']:.2f} cores "
                     f"({100 * (busy_c.get('other_share') or 0):.0f}% of its CPU time), {idle} "
                     f"{idle_c['other_cores']:.2f}: {busy}'s latency includes that contention")
    return found


def _versions(report: dict[str, Any]) -> dict[str, str]:
    context = report.get("context") or {}
    found = dict(context.get("versions") or {})
    found.update({k: v for k, v in ((report.get("device") or {}).get("libraries") or {}).items() if k not in found})
    from ..formats import runtime_libraries

    libraries = runtime_libraries()
    return {k: v for k, v in found.items() if k in libraries}


def _own(label: str, report: dict[str, Any]) -> list[str]:
    """What one report says about itself: unknown signals, a run that slowed down."""
    found = []
    conditions = report_conditions(report)
    if not conditions:
        found.append(f"{label}: no run context recorded (an older report): its conditions are unknown")
    elif conditions.get("throttled") is None:
        found.append(f"{label}: throttling could not be read there (no thermal zone or firmware flags): "
                     "it cannot be ruled out")
    allowed, online = conditions.get("cpus_allowed"), conditions.get("cpus_online")
    if allowed is not None and online is not None and allowed < online:
        found.append(f"{label} ran pinned to {allowed} of {online} CPUs (taskset or a cpuset)")
    for result in report.get("results") or []:
        verdict = ((result.get("sustained") or {}).get("verdict") or {})
        if verdict.get("verdict") in ("slowed down", "sped up"):  # not steady: which of its figures is "the" one?
            config = result.get("config") or {}
            found.append(f"{label} {config.get('artifact')}/{config.get('backend')} {verdict['verdict']} during its "
                         f"own sustained run ({result['sustained'].get('change_pct', 0):+.1f}%): {verdict.get('reason')}")
    return found


def own_warnings(reports: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """What each report says about its own run (not a difference from another report)."""
    return [line for name, report in reports for line in _own(_label(name, report), report)]


def condition_warnings(reports: list[tuple[str, dict[str, Any]]], baseline: int = 0) -> list[str]:
    """Every difference of conditions between the baseline report and each other report, then what
    each report says about itself."""
    differ, own = condition_sections(reports, baseline)
    return list(dict.fromkeys(differ + own))


def condition_sections(reports: list[tuple[str, dict[str, Any]]],
                       baseline: int = 0) -> tuple[list[str], list[str]]:
    """(differences between the baseline report and the others, what each report says about its own
    run): a reader is told "conditions differ" for the first only."""
    if not reports:
        return [], []
    base_name, base = reports[baseline]
    base_label = _label(base_name, base)
    found: list[str] = []
    for index, (name, report) in enumerate(reports):
        if index == baseline:
            continue
        label = _label(name, report)
        found += _pair(base_label, report_conditions(base), label, report_conditions(report))
        mine, theirs = _versions(base), _versions(report)
        changed = [f"{lib} {mine[lib]} vs {theirs[lib]}" for lib in sorted(set(mine) & set(theirs))
                   if mine[lib] != theirs[lib]]
        if changed:
            found.append(f"{base_label} and {label} ran different runtime versions ({', '.join(changed)}): part of "
                         "the difference is the runtime")
    own = own_warnings(reports)
    pinned = {label for label in (_label(name, report) for name, report in reports)
              if any(line.startswith(f"{label} ran on ") and "(pinned" in line for line in found)}
    own = [line for line in own if not any(line.startswith(f"{label} ran pinned") for label in pinned)]  # said once
    unread = [line for line in own if "could not be read" in line]
    if len(unread) == len(reports) and len(reports) > 1:  # the same blind spot everywhere: one line
        own = [line for line in own if line not in unread] + [
            "throttling could not be read on any of these devices (no thermal zone or firmware flags): "
            "it cannot be ruled out"]
    return list(dict.fromkeys(found)), [line for line in dict.fromkeys(own) if line not in found]
