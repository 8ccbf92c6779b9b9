rule checks:
    """Deviance (cells far from their run's modal output) and rotation bias (refusal)."""
    input:
        cells="results/cells.parquet",
    output:
        deviance="results/checks/deviance.csv",
        positions="results/checks/positions.csv",
        verdict="results/checks/verdict.json",
    log:
        "results/logs/checks.log",
    conda:
        "../envs/analyse.yaml"
    params:
        rotation_threshold=CFG["checks"]["rotation_threshold"],
        deviance_threshold=CFG["checks"]["deviance_threshold"],
    script:
        "../scripts/checks.py"
