"""The workflow's jobs, planned from the resolved config: the order Snakemake starts the measuring
jobs in (their priorities), what each asks of the executor (its resources), the blocks of reps
that consolidation reads, and the tokens that see a raw file change.

Plain data in and out, no Snakemake: rules/common.smk builds one ``Jobs`` as the workflow is
parsed, registers the resources it names and calls it from one-line input functions.
"""

from __future__ import annotations

import os

from slotbench.core import experiments
from slotbench.measure import rawfiles
from slotbench.measure.plan import pair_order
from slotbench.workflow import resources

# Below the experiment's folder (Jobs.raw and Jobs.block_prefix are the whole paths).
RAW = "raw/{target}/{run}/rep{rep}.json"
# Consolidation reads the raw files in blocks of at most this many reps of one target and run,
# then merges the blocks: a job with every raw file as an input stalls Snakemake's job
# preparation (it checks each input against each dependency, so 10^10 checks at a million
# requests), and a block that is already consolidated is not read again when reps are added.
REPS_PER_BLOCK = 1000
BLOCK_PREFIX = "consolidated/{target}/{run}/block{block}"
# The paired design's sides run one at a time: each holds the one unit of this resource.
PAIRED_TURN = "paired_turn"


def machine_cpus() -> list[int]:
    """The CPUs this process may run on: its affinity where the system tells it, else all."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def block_of(rep: int | str) -> int:
    """The block (1, 2, …) that rep ``rep`` is consolidated in."""
    return (int(rep) - 1) // REPS_PER_BLOCK + 1


class Jobs:
    """The jobs of one resolved config ``cfg``: its ``targets`` (names), ``runs`` (ids) and
    ``reps`` (numbers), measured on a machine with the CPUs ``machine_cpus``; every file they
    name lies in ``results``, the experiment's folder (experiments.results_dir), or with
    ``old_layout`` (the re-render of an archive made before experiments had their own
    folders) in results/ itself.

    A ConfigError (a target's URL the config's check would refuse) is raised here, as one line.
    """

    def __init__(self, cfg: dict, targets: list[str], runs: list[str], reps: list[int],
                 machine_cpus: list[int], old_layout: bool = False):
        self.targets, self.runs, self.reps = list(targets), list(runs), list(reps)
        self.results = experiments.RESULTS if old_layout else experiments.results_dir(cfg)
        self.raw = f"{self.results}/{RAW}"  # a rep's raw file
        self.block_prefix = f"{self.results}/{BLOCK_PREFIX}"  # a block of reps' outputs
        self.paired = cfg["design"] == "paired"
        # The paired design (design: paired): rep k of every target is pair k of its run, its
        # sides measured back to back in the order plan.pair_order derives from (seed, run,
        # pair), reversed every other pair (ABBA).
        self.pair_order = {
            run: {rep: pair_order(self.targets, cfg["seed"], run, rep) for rep in self.reps}
            for run in self.runs
        } if self.paired else {}
        sides = [(run, rep, target) for run in self.pair_order for rep in self.reps
                 for target in self.pair_order[run][rep]]
        self._side_priority = {side: len(sides) - i for i, side in enumerate(sides)}
        order = [(run, target) for run in self.runs for target in self.targets]
        self._run_priority = {key: len(sides) + len(order) - i for i, key in enumerate(order)}
        by_name = {t["name"]: t for t in cfg["targets"]}
        runtime = resources.rep_runtime_min(cfg)
        self.resources = {
            name: resources.job_resources(cfg, by_name[name], machine_cpus, runtime)
            for name in self.targets
        }
        # Every endpoint resource exists once, so two jobs that would share what they measure
        # (an external server's host and port, a CPU of a managed one) never run at once, under
        # --jobs N locally or on a cluster; different endpoints run side by side.
        shared = [n for name in self.targets
                  for n in resources.endpoint_resources(by_name[name], machine_cpus)]
        if self.paired:
            for spec in self.resources.values():
                spec[PAIRED_TURN] = 1
            shared.append(PAIRED_TURN)
        self.shared_resources = list(dict.fromkeys(shared))

    # --- priorities ---------------------------------------------------------------------------

    def run_priority(self, run: str, target: str) -> int:
        """A measuring job's priority: the jobs of one target and run go together, runs in
        order, so the run's server serves them all rather than restarting as runs interleave.
        In the paired design, every fingerprint and plan comes before the first side."""
        return self._run_priority[(run, target)]

    def rep_priority(self, run: str, target: str, rep: int | str) -> int:
        """A rep's priority: its run's (run_priority), or in the paired design its place in the
        sequence of sides (0 for a rep the config does not list, asked for by its file)."""
        if self.paired:
            return self._side_priority.get((run, int(rep), target), 0)
        return self.run_priority(run, target)

    # --- resources ----------------------------------------------------------------------------

    def resource_names(self) -> list[str]:
        """Every resource a measuring job of any target asks for, sorted."""
        return sorted({key for spec in self.resources.values() for key in spec})

    def resource(self, target: str, name: str, runtime_min: int | None = None) -> int:
        """How much of resource ``name`` a measuring job of ``target`` asks for (0 where it
        holds none); ``runtime_min`` replaces the rep's runtime estimate (a shorter job)."""
        if name == "runtime" and runtime_min is not None:
            return runtime_min
        return self.resources[target].get(name, 0)

    # --- blocks and tokens --------------------------------------------------------------------

    @property
    def blocks(self) -> list[int]:
        return sorted({block_of(rep) for rep in self.reps})

    def block_raw(self, target: str, run: str, block: int | str,
                           reps: list[int] | None = None) -> list[str]:
        """The raw files of the block's reps: of all ``reps`` (the config's when None; with
        reps: auto, those measured) those in the block."""
        return [self.raw.format(target=target, run=run, rep=rep)
                for rep in (self.reps if reps is None else reps) if block_of(rep) == int(block)]

    def block_tokens(self) -> dict[tuple[str, str, int], str]:
        """(target, run, block) -> a token that changes when a raw file the block's
        consolidation read was deleted, replaced or edited since (rawfiles.inventory_token),
        read from the files as they are now. The block, the merge and the report take it as a
        param, so the next plain run measures what is missing again and refuses what changed."""
        return {
            (target, run, block): rawfiles.inventory_token(
                self.block_raw(target, run, block),
                self.block_prefix.format(target=target, run=run, block=block)
                + ".inventory.json",
            )
            for target in self.targets
            for run in self.runs
            for block in self.blocks
        }


def raw_token(block_tokens: dict) -> str:
    """One token for all the blocks' tokens (the merge's and the report's): it changes when any
    of them does."""
    return rawfiles.combined_token(block_tokens.values())
