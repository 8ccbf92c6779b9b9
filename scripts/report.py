"""Rule report: results/<experiment>/report.md, the self-contained report.html and
provenance.json beside it, from the analysis, the checks and the figures (slotbench.report)."""

from slotbench.core.entry import progress_log
from slotbench.report import write_report


def main(sm) -> None:
    outputs = dict(sm.output)
    with progress_log(sm.log[0]) as log:
        write_report(dict(sm.input), outputs, dict(sm.params.config))
        print(f"report: {outputs['md']}, {outputs['html']}", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
