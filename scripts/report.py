"""Rule report: results/report.md, the self-contained results/report.html and
results/provenance.json, from the analysis, the checks and the figures (slotbench.report)."""

from slotbench.report import write_report


def main(sm) -> None:
    write_report(dict(sm.input), dict(sm.output), dict(sm.params.config))


main(snakemake)  # noqa: F821 - provided by Snakemake
