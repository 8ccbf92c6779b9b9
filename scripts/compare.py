"""Rule compare: this experiment's result (B) against the one named by --config
compare_with=NAME|PATH (A: another experiment's name, a result's folder or an archive), into
results/<experiment>/compare/ (the rows in slotbench.analysis.compare, the document in
slotbench.report.compare)."""

from pathlib import Path

from slotbench.analysis import compare
from slotbench.core.entry import fail, progress_log
from slotbench.report.compare import write
from slotbench.workflow.archive import ArchiveError


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        if not sm.params.compare_with:
            fail("compare: name the result to compare with: snakemake --cores 1 compare "
                 "--config compare_with=NAME|PATH (another experiment's name, a result's folder "
                 "or an archive)", log)
        try:
            a = compare.load_side(sm.params.compare_with)
            b = compare.load_side(Path(sm.input.ratios).parents[1])  # results/<experiment>/
        except (ArchiveError, FileNotFoundError, ValueError) as exc:
            fail(f"compare: {exc}", log)
        result = compare.compare(a, b, int(sm.params.n_boot), float(sm.params.ci),
                                 int(sm.params.seed), declared=tuple(sm.params.declare))
        written = write(result, (a, b), Path(sm.output.md).parent)
        print(f"compare: {a.name} (A) against {b.name} (B): " + ", ".join(map(str, written)),
              file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
