"""Each target's headline decision, from its verdicts: the only place a headline is allowed,
marked provisional or refused.

A verdict's ``effect`` says what it does when it applies: "refuse" when it fired, "provisional"
when it fired or could not be assessed (a check that could not look never passes by default),
"warn" when it fired (its warnings go before the headline). The report presents the decision.
"""

from __future__ import annotations

STATUSES = ("allowed", "provisional", "refused")


def _applies(record: dict) -> bool:
    if record["effect"] == "provisional":
        return record["fired"] or not record["assessable"]
    return bool(record["fired"])


def headline_decision(records: list[dict]) -> dict:
    """target -> {status, reasons (the sentences behind it), warnings, traps}."""
    out: dict[str, dict] = {}
    for rec in sorted(records, key=lambda r: (r["order"], r["trap"])):
        entry = out.setdefault(rec["target"], {"status": "allowed", "refusals": [],
                                               "provisional": [], "warnings": []})  # fmt: skip
        if not _applies(rec):
            continue
        if rec["effect"] == "refuse":
            entry["refusals"].append({"trap": rec["trap"], "sentence": rec["sentence"],
                                      "reason": rec["evidence"].get("reason")})  # fmt: skip
        elif rec["effect"] == "provisional":
            entry["provisional"].append({"trap": rec["trap"], "sentence": rec["sentence"]})
        elif rec["effect"] == "warn":
            texts = rec["evidence"].get("warnings") or [rec["sentence"]]
            entry["warnings"] += [{"trap": rec["trap"], "text": t} for t in texts]
    for entry in out.values():
        entry["status"] = ("refused" if entry["refusals"] else
                           "provisional" if entry["provisional"] else "allowed")  # fmt: skip
    return out
