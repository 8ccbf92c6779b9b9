"""Snakemake entry point: render results/report.md and the self-contained results/report.html."""

from slotbench import report


def main(snakemake) -> None:
    inp = snakemake.input
    report.write_report(
        summary=inp.summary,
        ratios=inp.ratios,
        deviance=inp.deviance,
        positions=inp.positions,
        verdict=inp.verdict,
        sources=inp.sources,
        figures=list(inp.figures),
        fingerprints=list(inp.fingerprints),
        requests=inp.requests,
        servers=inp.servers,
        serialisation=inp.serialisation,
        md_out=snakemake.output.md,
        html_out=snakemake.output.html,
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake
