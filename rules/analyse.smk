rule analyse:
    """Within-rep ratios against the serial arm; medians across reps with bootstrap CIs; the
    capacity under the configured service levels and the saturation point."""
    input:
        code=code("analyse.py"),
        cells="results/cells.parquet",
    output:
        ratios="results/analysis/ratios.parquet",
        summary="results/analysis/summary.csv",
        capacity="results/analysis/capacity.json",
    log:
        "results/logs/analyse.log",
    conda:
        "../envs/analyse.yaml"
    params:
        n_boot=CFG["analysis"]["bootstrap"],
        ci=CFG["analysis"]["ci"],
        seed=CFG["seed"],
        slo=CFG["slo"],
    script:
        "../scripts/analyse.py"
