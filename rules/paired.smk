rule paired:
    """The paired design (design: paired): every target against the first, pair by pair: the
    per-pair ratio B / A of every compare row with its interval, the signed-rank test, Holm
    over the rows, the verdicts, what an unpaired comparison of the same cells would say, and
    the drift line (the serial arm's rate of every side over the run's time)."""
    input:
        code=code("paired.py"),
        ratios="results/analysis/ratios.parquet",
        cells="results/cells.parquet",
        checks="results/checks",
    output:
        json="results/analysis/paired.json",
        figure="results/figures/paired.png",
    log:
        "results/logs/paired.log",
    conda:
        "../envs/report.yaml"
    params:
        targets=TARGETS,
        order=PAIR_ORDER,
        n_boot=CFG["analysis"]["bootstrap"],
        ci=CFG["analysis"]["ci"],
        seed=CFG["seed"],
    script:
        "../scripts/paired.py"
