"""Test support: the shipped continuation cases, for the tests of the summary rules and their tables.

Imported by test files, never run on its own. It reads continuation-cases.json as it loads, so it is kept apart
from test_support_fixtures, which nearly every test file imports, some in a copy of the lab's code alone.
"""
from case_set import load_cases
import continuation

CONTINUATION_CASES = load_cases(continuation.CASES)  # the shipped continuation cases: read them, never change them
