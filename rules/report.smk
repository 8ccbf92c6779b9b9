rule report:
    """results/report.md and a self-contained results/report.html."""
    input:
        summary="results/analysis/summary.csv",
        ratios="results/analysis/ratios.parquet",
        deviance="results/checks/deviance.csv",
        positions="results/checks/positions.csv",
        serialisation="results/checks/serialisation.csv",
        verdict="results/checks/verdict.json",
        requests="results/requests.parquet",
        servers="results/servers.json",
        sources="results/figures/sources.json",
        figures=expand("results/figures/{name}.png", name=FIGURES),
        fingerprints=fingerprint_files,
    output:
        md="results/report.md",
        html="results/report.html",
    log:
        "results/logs/report.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/report.py"
