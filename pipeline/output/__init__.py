"""What a build writes and how it is read back: where a build may write (:mod:`.paths`), the staged, atomic writing
of every output (:mod:`.write`), and reading a build again (:mod:`.inspect`, :mod:`.dataset`)."""
