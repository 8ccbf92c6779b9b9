rule compare:
    """This result against another (a results directory or an archive): B − A per target, arm
    and metric with bootstrap intervals and verdicts. Run on request:
    snakemake --cores 1 compare --config compare_with=PATH [compare_declare=FIELD,FIELD]
    """
    input:
        code=code("compare.py"),
        templates=html_templates(),
        ratios="results/analysis/ratios.parquet",
        checks="results/checks",
        fingerprints=fingerprint_files,
        plans=plan_files,
    output:
        md="results/compare/compare.md",
        html="results/compare/compare.html",
        json="results/compare/compare.json",
        figure="results/compare/compare.png",
    log:
        "results/logs/compare.log",
    conda:
        "../envs/report.yaml"
    params:
        compare_with=COMPARE_WITH,
        declare=COMPARE_DECLARE,
        ci=CFG["analysis"]["ci"],
        n_boot=CFG["analysis"]["bootstrap"],
        seed=CFG["seed"],
    script:
        "../scripts/compare.py"
