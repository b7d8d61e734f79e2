"""``badpoints check``: badpoints' guards pointed at what a user's own pipeline makes: a table of any size checked
against a schema of the user's (:mod:`.run`, on the ``check`` stage: :mod:`.stage`; the table read in blocks:
:mod:`.table`; the schema loaded or inferred: :mod:`.schema`)."""
