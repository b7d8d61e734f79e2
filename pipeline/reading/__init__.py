"""Reading the inputs: where each table is (:mod:`.locate`), its bytes streamed in blocks (:mod:`.load`,
:mod:`.decode`, the problems of reading in :mod:`.load_error`), and the raw checks that type them
(:mod:`.parse`)."""
