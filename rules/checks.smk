rule checks:
    """Deviance, rotation bias (refusal) and serialisation (a parallel arm served one at a time)."""
    input:
        cells="results/cells.parquet",
        requests="results/requests.parquet",
    output:
        deviance="results/checks/deviance.csv",
        positions="results/checks/positions.csv",
        serialisation="results/checks/serialisation.csv",
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
