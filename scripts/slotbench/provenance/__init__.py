"""Provenance: every reported number's id and the cells behind it (ids, cellsets), and the
`explain` command that prints them."""
