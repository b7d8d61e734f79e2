"""The kernel every run stands on: what a stage is (:mod:`.stage`), the passes its declaration implies
(:mod:`.passes`), the work a plan hands an engine (:mod:`.calls`), what an engine is (:mod:`.engine`), a config
section (:mod:`.options`), the records a stage hands back (:mod:`.quarantine`, :mod:`.finding`) and the values
handed to its calls (:mod:`.handed`).

It names no stage, no dataset and no engine, and imports nothing of badpoints but itself: the lab flow, a MEDS
run and the graph build are stages declared on it.
"""
