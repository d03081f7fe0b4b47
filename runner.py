"""The one runner: every rule on every case, each request graded; and the header every report opens with.

    from runner import run_rules, report_header
    rows = run_rules(cases, RULES, counter())    # rule -> its graded rows, in case-set order
    report_header(Path('cases.json'), case_set_sha256, rule_files=[])   # what the rows were made from

evaluate.py (a report, or one case's --show), budget_sweep.py and benchmark.py all run rules through
`case_selections`, so each grades the same way. The header names the case file by the SHA-256 of the bytes
that were parsed, the code that can change a row, the counter and the Python that ran it
(docs/reviewing.md). It prints nothing but progress.
"""
from contextlib import contextmanager
import platform

from common import HERE, progress
from lab_files import path_text, sha256_file
from scorer import graded_row
from shapes import build_request
from tokenizer import CounterError, counter

# Every module whose change can change a row (a report with --rules adds rule_files.py, which runs rules files).
CODE_FILES = ('common.py', 'shapes.py', 'case_set.py', 'scorer.py', 'runner.py', 'strategies.py', 'tokenizer.py',
              'tool_formats.py', 'best_possible.py', 'evaluate.py')


def run_rules(cases: list[dict], rules: dict, count, script: str = '') -> dict[str, list[dict]]:
    """Rows of every rule on every case, in case-set order; progress on stderr when `script` names the caller."""
    rows = {name: [] for name in rules}
    for done, case in enumerate(cases, 1):
        for name, row in case_selections(case, rules, count)[1].items():
            rows[name].append(row)
        if script:
            progress(script, done, len(cases))
    return rows


def case_selections(case: dict, rules: dict, count) -> tuple[dict, dict]:
    """(rule -> selection, rule -> graded row) on one case, graded as the counter that counted renders each request
    (its name; the chosen counter's for a count without one)."""
    chosen = {name: rule(case, count) for name, rule in rules.items()}
    return chosen, {name: graded_row(case, selected, getattr(count, 'name', None)) for name, selected in chosen.items()}


@contextmanager
def counting(path, cases: list[dict]):
    """Run a block that counts these cases' requests; a CounterError it raises comes out naming the file, the case
    and the message as the case numbers its messages: the first case whose whole request or turns the counter chosen
    then refuses says what (a rule's request holds fewer messages, so its indexes would point elsewhere), else the
    file alone."""
    counter()  # a counter that is not prepared is refused as it is, not as a case's fault
    try:
        yield
    except CounterError as error:
        count = counter()
        for case in cases:
            try:
                count(build_request(case, range(len(case['history']))))
                count.turn_costs(case['history'])
            except CounterError as found:
                raise CounterError(f'{path}: case {case["id"]}: {found}') from None
        raise CounterError(f'{path}: {error}') from None


def report_header(path, case_set_sha256: str, rule_files: list[dict], *more_code: str) -> dict:
    """The opening keys of every report, in this order; the code hashed is CODE_FILES, rule_files.py and
    rules_process.py with rules files, and `more_code`, the script's own (the case file's name is kept as
    UTF-8-safe text)."""
    code = (*CODE_FILES, *['rule_files.py', 'rules_process.py'] * bool(rule_files), *more_code)
    return {'case_set': path_text(path.name), 'case_set_sha256': case_set_sha256,
            'code_sha256': {name: sha256_file(HERE / name) for name in code},
            **({'rule_files': rule_files} if rule_files else {}),  # no key at all without --rules
            'tokenizer_manifest_sha256': sha256_file(HERE / 'tokenizer-manifest.json'),
            'environment': {'python': platform.python_version(), 'implementation': platform.python_implementation()},
            'counter': counter().profile()}
