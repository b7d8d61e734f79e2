"""Synthetic MIMIC-shaped raw tables at any scale, for the benchmark: seeded, fast, memory-bounded.

Usage: ``python -m bench.synth OUT_DIR --rows N [--seed S] [--layout mimic3|mimic4] [--shape default|heavy]`` writes
``ADMISSIONS.csv``, ``D_LABITEMS.csv``, ``LABEVENTS.csv`` (exactly N rows; ``--layout mimic4``:
``hosp/admissions.csv.gz``, ``hosp/d_labitems.csv.gz``, ``hosp/labevents.csv.gz``) and ``synth.json``
(the parameters, the layout, the shape and the special items) into OUT_DIR.

The files have the columns and formats of ``data/sample`` (MIMIC-III v1.4: upper-case headers,
minimal quoting, empty nulls, ``YYYY-MM-DD HH:MM:SS`` in 2100-2210) and MIMIC-III's proportions:

- about 470 lab rows per admission (admissions = rows / 470), 1.27 admissions per subject;
- 753 lab items with Zipf-like popularity (the top item ~3% of rows, the top 10 ~27%): the
  sample's 46 real items (labels, units, distributions, categorical tokens) lead, 707 synthetic
  items follow; numeric, categorical ('NEG', '1+', 'Cloudy') and mixed items ('<0.1',
  'See Comments' among numbers);
- 15% outpatient rows (no HADM_ID, 7-365 days away from the subject's stays), 1% of specimen
  draws charted 2-48 h before ADMITTIME and 1% 1-72 h after DISCHTIME;
- FLAG 'abnormal' outside each item's reference range, 'delta' on 2% of normal rows, else empty;
- CHARTTIME ties: a draw (one specimen) gives its rows one CHARTTIME, and a few draws repeat an item;
- special items, listed in ``synth.json``: two constant items (every value equal), three items
  observed exactly once, an ill-conditioned item (mean 1e6, std 1e-3) and 29 items never ordered.

Every ID, time, FLAG and foreign key is valid: ``badpoints validate`` exits 0 with warnings only.

``--shape`` (a :class:`~bench.synth.shape.Shape`) moves the rows a build sets aside or merges: the outpatient share,
the shares of inpatient draws charted before ADMITTIME and after DISCHTIME, and the share of inpatient rows that
repeat an item of their admission's same day (which dedup merges). ``default`` is the proportions above (its bytes are
those of the generator before shapes); ``heavy`` has 30% outpatient rows, 16% and 7% of draws before and after the
stay and 83% repeats: its build quarantines about 42% of the rows and merges about 82% of the rest.
``--outpatient-share``, ``--early-draw-share``, ``--late-draw-share`` and ``--repeat-share`` override a preset's value.

``--layout mimic4`` writes the same events in MIMIC-IV 2.2's ``hosp`` module: lower-case headers
(labevents: ``labevent_id, subject_id, hadm_id, specimen_id, itemid, order_provider_id, charttime,
storetime, value, valuenum, valueuom, ref_range_lower, ref_range_upper, flag, priority, comments``),
8-digit IDs (subjects from 10,000,000, admissions from 20,000,000), gzip-compressed. It differs from
MIMIC-III's as MIMIC-IV does: 40% outpatient rows (empty ``hadm_id``); ``specimen_id`` per draw;
the item's reference range on 95% of the rows with a number (items that have one); ``flag`` 'abnormal' or empty (no
'delta'); 1% of rows with their result only in ``comments`` (``value`` and ``valuenum`` empty:
'NEG.', '___', 'UNABLE TO REPORT.', ...) and 3% with a comment beside their value.

Speed and memory: one numpy Generator fills the small tables; LABEVENTS is generated in chunks
of about :data:`~bench.synth.shape.CHUNK_ROWS` rows (whole subjects, so the file stays sorted by
subject), each chunk from its own seeded Generator, vectorized, formatted with pyarrow compute and
streamed to the file with pyarrow's CSV writer (through gzip at level
:data:`~bench.synth.shape.GZIP_LEVEL` for mimic4, whose 118M rows are ~15 GB of text). Output is
byte-identical for the same rows, seed and layout.

Modules, in the order the data is made: :mod:`~bench.synth.shape` (proportions, vocabularies, headers),
:mod:`~bench.synth.tables` (items and admissions), :mod:`~bench.synth.labevents` (a chunk of lab rows),
:mod:`~bench.synth.mimic4` (MIMIC-IV's layout), :mod:`~bench.synth.write` (the files, the command line).
"""

from bench.synth.shape import LAYOUTS, SEED
from bench.synth.write import main, write_synthetic

__all__ = ["LAYOUTS", "SEED", "main", "write_synthetic"]
