rule analyse:
    """Within-rep ratios against the serial arm; medians across reps with bootstrap CIs; the
    capacity under the configured service levels and the saturation point; the open loop's
    numbers per rate arm, their goodput and the capacity in requests/s (openloop.json).
    """
    input:
        code=code("analyse.py"),
        cells="results/cells.parquet",
        requests="results/requests.parquet",
    output:
        ratios="results/analysis/ratios.parquet",
        summary="results/analysis/summary.csv",
        capacity="results/analysis/capacity.json",
        openloop="results/analysis/openloop.json",
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
