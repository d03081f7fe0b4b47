"""The summary compaction as a rules file: summaries.py's rule, replaying the recorded summary calls offline.

    .venv/bin/python evaluate.py --cases agent-cases.json --rules summary_rules.py --format table

    llm-summary   the newest turns within the allowance less the summary's target, after one quoted summary of
                  the older turns (summaries.py), every call answered from summary-recording.json
                  ($CONTEXT_LAB_SUMMARIES names another)

No model runs: a call the recording lacks stops the run with one line naming the case and the command that records
it (summary_record.py). It reads the recording once per rules process and writes nothing.
"""
from functools import cache

import summaries
from summaries import compact


@cache
def calls() -> dict:
    return summaries.load(summaries.recording_path())['calls']


def summary(case: dict, count) -> dict:
    return compact(case, count, summaries.replaying(calls(), case['id'], summaries.SOME_CASES))[0]


RULES = {'llm-summary': summary}
