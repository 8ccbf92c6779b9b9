rule compare:
    """This result against another (an experiment's name, a result's folder or an archive):
    B − A per target, arm and metric with bootstrap intervals and verdicts. Run on request:
    snakemake --cores 1 compare --config compare_with=NAME|PATH [compare_declare=FIELD,FIELD]
    """
    input:
        code=code("compare.py"),
        templates=html_templates(),
        ratios=result("analysis/ratios.parquet"),
        checks=result("checks"),
        fingerprints=fingerprint_files,
        plans=plan_files,
    output:
        md=result("compare/compare.md"),
        html=result("compare/compare.html"),
        json=result("compare/compare.json"),
        figure=result("compare/compare.png"),
    log:
        result("logs/compare.log"),
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
