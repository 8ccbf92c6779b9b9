"""Each target's headline decision, from its verdicts: the only place a headline is allowed,
marked provisional or refused.

A verdict's ``effect`` says what it does to the headline: "refuse", "provisional" (a check that
could not look, or could not decide, never passes by default), "exclude" (its arms get no
headline; with evidence ``no_percentiles`` their latency figures are not quoted either), "warn" (its
warnings go before the headline) or "none". A verdict's evidence ``unquoted_metrics`` ("ttft",
"user") names numbers that no arm may quote as a headline (e.g. a buffered stream's client-timed
ones). The report presents the decision.
"""

from __future__ import annotations


def headline_decision(records: list[dict]) -> dict:
    """target -> {status, reasons (the sentences behind it), warnings, traps}."""
    out: dict[str, dict] = {}
    for rec in sorted(records, key=lambda r: (r["order"], r["trap"])):
        entry = out.setdefault(rec["target"], {"status": "allowed", "refusals": [],
                                               "provisional": [], "warnings": [],
                                               "excluded_arms": {},
                                               "no_percentiles": [],
                                               "unquoted_metrics": []})
        for metric in rec["evidence"].get("unquoted_metrics") or [] if rec["fired"] else []:
            if metric not in entry["unquoted_metrics"]:
                entry["unquoted_metrics"].append(metric)
        if rec["effect"] == "refuse":
            entry["refusals"].append({"trap": rec["trap"], "sentence": rec["sentence"],
                                      "reason": rec["evidence"].get("reason")})
        elif rec["effect"] == "provisional":
            entry["provisional"].append({"trap": rec["trap"], "sentence": rec["sentence"]})
        elif rec["effect"] == "exclude":
            for arm in rec["arms"]:
                entry["excluded_arms"][str(arm)] = rec["evidence"].get("why", {}).get(
                    str(arm), rec["sentence"])
            if rec["evidence"].get("no_percentiles"):  # e.g. a queue that grew all cell long
                entry["no_percentiles"] += [str(a) for a in rec["arms"]]
            entry["warnings"] += [{"trap": rec["trap"], "text": t}
                                  for t in rec["evidence"].get("warnings") or [rec["sentence"]]]
        elif rec["effect"] == "warn":
            texts = rec["evidence"].get("warnings") or [rec["sentence"]]
            entry["warnings"] += [{"trap": rec["trap"], "text": t} for t in texts]
    for entry in out.values():
        entry["status"] = ("refused" if entry["refusals"] else
                           "provisional" if entry["provisional"] else "allowed")
    return out
