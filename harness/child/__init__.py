"""What runs beside untrusted code, inside its sandbox: nothing here decides anything.

record.py    phase candidate_record: import the candidate and record, shape by shape, what
             its prepare()/run() launch (recorder.py) as a Plan (harness/plan.py)
serve.py     phase candidate_serve (CPU only): replay those plans under Triton's interpreter
             on buffers the judge shares with it, one call per request
precompile   phase candidate_precompile: the same recording ahead of time, for the cache

None of these holds a key, a reference, a baseline or a clock: what they send back is data
the judge checks (harness/judge/). This package never imports harness.judge (the layout test
keeps it so).
"""
