FIGURES = ["throughput", "ttft", "decomposition", "positions", "timeline"]


rule figures:
    """Operator vs per-user throughput, TTFT, batching vs pipelining, positions, and the
    timeline annotated with the machine's thermal state."""
    input:
        code=code("figures.py"),
        cells="results/cells.parquet",
        ratios="results/analysis/ratios.parquet",
        thermal="results/thermal.parquet",
    output:
        **{
            name: report(
                f"results/figures/{name}.png",
                caption=f"../report/{name}.rst",
                category="Figures",
            )
            for name in FIGURES
        },
        sources="results/figures/sources.json",
    log:
        "results/logs/figures.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/figures.py"
