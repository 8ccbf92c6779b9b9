"""One detail renderer per trap that needs more than its sentence: ``render(verdict, ctx)``
returns the blocks (headings, paragraphs, tables, sources) shown under the traps table. A module
is matched to its trap by its ``TRAP`` name, else by its file name; a trap without one gets the
generic details (slotbench.report.traps.default_details)."""

# Its modules are found by looking (slotbench.core.code follows them as a rule's code).
DISCOVERED = True
