"""Snakemake entry point: render results/report.md, the self-contained results/report.html and
results/provenance.json (the cells, raw files, code and config behind every table and figure),
with each target's Measurement integrity section from the checks' files."""

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
        cells=inp.cells,
        prompts=inp.prompts,
        cache_hits=inp.cache_hits,
        control=inp.control,
        thermal_summary=inp.thermal_summary,
        burst=inp.burst,
        client=inp.client,
        sufficiency=inp.sufficiency,
        thermal=inp.thermal,
        md_out=snakemake.output.md,
        html_out=snakemake.output.html,
        provenance_out=snakemake.output.provenance,
        config_sha256=snakemake.params.config_sha256,
        resolved_config=snakemake.params.resolved_config,
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake
