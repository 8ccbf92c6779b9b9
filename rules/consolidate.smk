rule consolidate:
    """All raw rep files of all targets and runs into two Parquet tables.

    Each raw file is checked against the SHA-256 recorded when it was written; one that changed
    since is refused by name, and the report built from it is withdrawn."""
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
        inventory="results/inventory.json",
    log:
        "results/logs/consolidate.log",
    conda:
        "../envs/analyse.yaml"
    params:
        token=RAW_TOKEN,
        # withdrawn when a raw file is refused: they were built from it
        withdraw=["results/report.md", "results/report.html"],
    script:
        "../scripts/consolidate.py"
