rule consolidate:
    """All raw rep files of all targets and runs into two Parquet tables."""
    input:
        raw=raw_files,
    output:
        requests="results/requests.parquet",
        cells="results/cells.parquet",
        servers="results/servers.json",
    log:
        "results/logs/consolidate.log",
    conda:
        "../envs/analyse.yaml"
    script:
        "../scripts/consolidate.py"
