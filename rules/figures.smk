FIGURES = [
    "throughput",
    "ttft",
    "decomposition",
    "positions",
    "timeline",
    "capacity",
    "across",
]


rule figures:
    """Operator vs per-user throughput, TTFT, batching vs pipelining, positions, the timeline
    annotated with the machine's thermal state, the capacity curve, and the targets side by
    side (shown in the report with two targets or more)."""
    input:
        code=code("figures.py"),
        cells="results/cells.parquet",
        ratios="results/analysis/ratios.parquet",
        thermal="results/thermal.parquet",
        capacity="results/analysis/capacity.json",
        summary="results/analysis/summary.csv",
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
