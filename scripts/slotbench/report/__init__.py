"""The report: operator gain vs per-user loss, batching vs pipelining, and every check behind
them, as Markdown, a self-contained HTML page and provenance.json.

It presents and decides nothing: the numbers come from the analysis (summary.csv), every verdict
and the headline decision from the checks (results/<experiment>/checks/), the pictures from the
figures.

Layout (one module per concern):
  blocks.py       the neutral document's block types
  render_md.py    Markdown (compact sources; full lists in the appendix and the HTML)
  render_html.py  the self-contained HTML page, from the templates in the checkout's report/html/
  headline.py     headline sentences, batching-or-pipelining reading, per-arm table
  traps.py        the traps table and the dispatch to each trap's details
  details/        one renderer per trap that needs more than its sentence
  sections.py     measured-how lines, figures, fingerprints, config, provenance, raw files
  document.py     loading the inputs, assembling the document, writing the files
"""

from slotbench.report.document import ReportData, build_document, load, render, write_report

__all__ = ["ReportData", "build_document", "load", "render", "write_report"]
