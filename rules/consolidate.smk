rule consolidate_block:
    """The raw files of one block of reps (workflow/jobs.py: REPS_PER_BLOCK) of one target and run
    into that block's tables.

    Each raw file is checked against the SHA-256 recorded when it was written; one that changed
    since is refused by name, and the report built from it is withdrawn."""
    input:
        code=code("consolidate_block.py"),
        raw=block_raw_files,
        sha256=block_sha256_files,
    output:
        requests=f"{JOBS.block_prefix}.requests.parquet",
        cells=f"{JOBS.block_prefix}.cells.parquet",
        thermal=f"{JOBS.block_prefix}.thermal.parquet",
        host=f"{JOBS.block_prefix}.host.parquet",
        server_metrics=f"{JOBS.block_prefix}.server_metrics.parquet",
        meta=f"{JOBS.block_prefix}.json",
        inventory=f"{JOBS.block_prefix}.inventory.json",
    log:
        result("logs/consolidate/{target}/{run}/block{block}.log"),
    conda:
        "../envs/analyse.yaml"
    params:
        token=block_token,
        # withdrawn when a raw file is refused: they were built from it
        withdraw=[result("report.md"), result("report.html")],
    script:
        "../scripts/consolidate_block.py"


rule consolidate:
    """Every block of every target and run into the pipeline's Parquet tables; raw files of a
    target measured under different settings are refused, naming each file and key."""
    input:
        # reps: auto: the look that stopped it under these settings and this code (an input
        # only then): a change decides again, and the blocks grow if it says so
        **({"stopped": rules.stopped.output[0]} if STOPPING else {}),
        code=code("consolidate.py"),
        blocks=block_files("json"),
        tables=[
            block_files(f"{kind}.parquet")
            for kind in ("requests", "cells", "thermal", "host", "server_metrics")
        ],
        inventories=block_files("inventory.json"),
    output:
        requests=result("requests.parquet"),
        cells=result("cells.parquet"),
        servers=result("servers.json"),
        control=result("control.parquet"),
        thermal=result("thermal.parquet"),
        host=result("host.parquet"),
        # every scrape of the server's /metrics and the exporters (docs/telemetry.md)
        server_metrics=result("server_metrics.parquet"),
        inventory=result("inventory.json"),
    log:
        result("logs/consolidate.log"),
    conda:
        "../envs/analyse.yaml"
    params:
        token=RAW_TOKEN,
        withdraw=[result("report.md"), result("report.html")],
    script:
        "../scripts/consolidate.py"
