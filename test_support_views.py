"""Test support: what the views print, for the tests of --show, the turn map and the forged names.

Imported by test files, never run on its own.
"""
from functools import lru_cache
import subprocess

import evaluate
from runner import case_selections
from test_support_runs import in_process
from tokenizer import counter
import views


def show_case(case: dict, rules: dict, full: bool = False) -> str:
    """What --show prints for these rules on one case, without colour and without the best possible selection."""
    return views.show_requests(case, *case_selections(case, rules, counter()), False, full, False)


@lru_cache(maxsize=None)
def evaluate_once(*args: str) -> subprocess.CompletedProcess:
    """evaluate.py ARGS, run once (in this process: test_support_runs.in_process) for all the tests that read its
    output, since the views are deterministic."""
    return in_process(evaluate, *args)
