rule paired:
    """The paired design (design: paired): every target against the first, pair by pair: the
    per-pair ratio B / A of every compare row with its interval, the signed-rank test, Holm
    over the rows, the verdicts, what an unpaired comparison of the same cells would say, and
    the drift line (the serial arm's rate of every side over the run's time)."""
    input:
        code=code("paired.py"),
        ratios=result("analysis/ratios.parquet"),
        cells=result("cells.parquet"),
        checks=result("checks"),
    output:
        json=result("analysis/paired.json"),
        figure=result("figures/paired.png"),
    log:
        result("logs/paired.log"),
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
