FIGURES = [
    "throughput",
    "ttft",
    "decomposition",
    "positions",
    "timeline",
    "capacity",
    "across",
    "server_batch",
]
# The open loop's figures (slotbench/figures/openloop.py): placeholders, not shown, without rate arms.
OPEN_FIGURES = [
    "latency_load",
    "achieved_offered",
    "concurrency_axis",
]
# A grid of workloads' frontier (slotbench/figures/frontier.py): only with a grid, so that other
# experiments' figures stay as they are.
GRID_FIGURES = ["frontier"] if GRID else []


rule figures:
    """Operator vs per-user throughput, TTFT, batching vs pipelining, positions, the timeline
    annotated with the machine's thermal state, the capacity curve, the server's batch and
    queue over each cell of a typical rep (from its scrapes), and the targets side by
    side (shown in the report with two targets or more); with rate arms, the open loop's
    latency against load, achieved against offered rate and both loops on the effective
    concurrency axis, overloaded arms marked from the overload check's verdict (with rate arms
    only, the figures read the checks, so a threshold change redraws them; without, they
    never wait for the checks); with a grid of workloads, their frontier."""
    input:
        **({"checks": result("checks")} if RATE_ARMS else {}),
        # a grid of workloads: the frontier, drawn from analysis/frontier.json
        **({"frontier": result("analysis/frontier.json")} if GRID else {}),
        code=code("figures.py"),
        cells=result("cells.parquet"),
        ratios=result("analysis/ratios.parquet"),
        thermal=result("thermal.parquet"),
        server_metrics=result("server_metrics.parquet"),
        capacity=result("analysis/capacity.json"),
        summary=result("analysis/summary.csv"),
        openloop=result("analysis/openloop.json"),
    output:
        **{
            name: report(
                result(f"figures/{name}.png"),
                caption=f"../report/{name}.rst",
                category="Figures",
            )
            for name in FIGURES
        },
        **{
            name: report(
                result(f"figures/{name}.png"),
                category="Figures",
                subcategory="Open loop",
            )
            for name in OPEN_FIGURES
        },
        **{
            name: report(
                result(f"figures/{name}.png"),
                caption=f"../report/{name}.rst",
                category="Figures",
            )
            for name in GRID_FIGURES
        },
        sources=result("figures/sources.json"),
    log:
        result("logs/figures.log"),
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/figures.py"
