rule consolidate:
    """All raw rep files of all targets and runs into two Parquet tables.

    Each raw file is checked against the SHA-256 recorded when it was written; one that changed
    since is refused by name."""
    input:
        code=code("consolidate.py"),
        raw=raw_files,
        sha256=raw_sha256_files,
    output:
        requests="results/requests.parquet",
        cells="results/cells.parquet",
        servers="results/servers.json",
        control="results/control.parquet",
        thermal="results/thermal.parquet",
        host="results/host.parquet",
    log:
        "results/logs/consolidate.log",
    conda:
        "../envs/analyse.yaml"
    script:
        "../scripts/consolidate.py"
