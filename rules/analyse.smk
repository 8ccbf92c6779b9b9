rule analyse:
    """Within-rep ratios against the serial arm; medians across reps with bootstrap CIs."""
    input:
        code=code("analyse.py"),
        cells="results/cells.parquet",
    output:
        ratios="results/analysis/ratios.parquet",
        summary="results/analysis/summary.csv",
    log:
        "results/logs/analyse.log",
    conda:
        "../envs/analyse.yaml"
    params:
        n_boot=CFG["analysis"]["bootstrap"],
        ci=CFG["analysis"]["ci"],
        seed=CFG["seed"],
    script:
        "../scripts/analyse.py"
