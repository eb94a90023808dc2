"""Leads for the serving-evidence set that were examined and not imported (issue 14 §3 follow-up).

bench/serving_evidence.json keeps, under `leads`, each public source that was looked at for a chip the set
lacks (MI325X fit data, L4 FP8) and not turned into points, with what was checked and why it was left out,
so the next search starts where this one stopped. bench/serving_evidence.py validates them with
`lead_problems` and renders them with `leads_section` into docs/serving-evidence.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REQUIRED_LEAD_FIELDS: tuple[str, ...] = ("id", "title", "url", "for_gpus", "checked", "finding", "status")
STATUSES: tuple[str, ...] = ("not imported",)


def lead_problems(document: Mapping[str, Any], gpu_slugs: set[str] | None = None) -> list[str]:
    """Everything wrong with the `leads` list (empty when well-formed)."""
    found: list[str] = []
    ids: set[str] = set()
    for lead in document.get("leads", []):
        lid = str(lead.get("id", "?"))
        missing = [f for f in REQUIRED_LEAD_FIELDS if not lead.get(f)]
        if missing:
            found.append(f"lead {lid}: missing {', '.join(missing)}")
            continue
        if lid in ids:
            found.append(f"lead {lid}: duplicate id")
        ids.add(lid)
        if not str(lead["url"]).startswith("https://"):
            found.append(f"lead {lid}: url is not https")
        if lead["status"] not in STATUSES:
            found.append(f"lead {lid}: status {lead['status']!r} not one of {STATUSES}")
        if gpu_slugs is not None:
            for gpu in lead["for_gpus"]:
                if gpu not in gpu_slugs:
                    found.append(f"lead {lid}: gpu {gpu!r} is not a catalog gpus slug")
    return found


def leads_section(document: Mapping[str, Any]) -> list[str]:
    """The report's section on leads examined and not imported (no lines when there are none)."""
    leads = document.get("leads", [])
    if not leads:
        return []
    lines = [
        "",
        "## Leads examined and not imported",
        "",
        "Public sources looked at for what the set still lacks and left out, with what was checked (the",
        "`leads` list in the JSON). A lead becomes points only when its figures can be read in full and say",
        "the engine, release, precision, parallelism, lengths and concurrency.",
        "",
        "| lead | for | checked | finding | status |",
        "|---|---|---|---|---|",
    ]
    for lead in leads:
        lines.append(
            f"| **{lead['id']}**: {lead['title']} <{lead['url']}> | {', '.join(lead['for_gpus'])} | {lead['checked']} | "
            f"{lead['finding']} | {lead['status']} |"
        )
    return lines
