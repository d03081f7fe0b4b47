"""How much CPU each rule costs on a case set: the four, and the rules of any --rules file, timed one by one.

    .venv/bin/python rule_timing.py                                   # the four on cases.json
    .venv/bin/python rule_timing.py --cases locomo-cases.json --rules field_rules.py

Every rule runs on every case twice, one rule at a time, and each rule's calls are
timed in this process's CPU seconds (time.process_time). The cases, the counter
and the rules files are loaded before any timing starts. The first pass of a rule
pays for what it builds and keeps on first use, as it does in an evaluate.py run:
a model it loads (dense: WordLlama's), its indexes and embeddings, the counts of
messages no rule before it measured. The second pass is what the rule costs once all of that is built,
which is what it costs at a further budget of a sweep. Rules are timed in the order
evaluate.py runs them, so a rule that reuses what an earlier one built (hybrid
reuses relevant's word overlaps, fused the two rankings it fuses) shows that in its
first pass.

It prints a Markdown table and writes nothing. It grades nothing either: the
figures of what each rule finds are evaluate.py's. Times depend on the machine and
what else runs on it: compare rules only within one run, and repeat it. No test
checks the times; test_rule_timing.py checks what is timed and the table.
"""
import argparse
from pathlib import Path
import sys
import time

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

from case_set import CaseError, load_cases
import evaluate
from rule_files import RuleError, load_rule_files
from strategies import STRATEGIES
from tokenizer import CounterError, count_request, counter

PASSES = ('first pass', 'second pass')  # the columns: a rule's calls over every case, twice


def time_rules(cases: list[dict], rules: dict, count=count_request, clock=time.process_time) -> dict:
    """rule -> (CPU seconds of its first pass over the cases, of its second), rules in the order given.

    With a clock that advances by 1 per call and one case, every pass takes 1 second:
    time_rules([case], {'recent': recent}, clock=ticks) -> {'recent': (1, 1)}
    """
    seconds = {}
    for name, rule in rules.items():
        passes = []
        for _ in PASSES:
            start = clock()
            for case in cases:
                rule(case, count)
            passes.append(clock() - start)
        seconds[name] = tuple(passes)
    return seconds


def table(seconds: dict) -> str:
    """The timings as a Markdown table: {'recent': (1.234, 0.5)} -> '| Rule | First pass, CPU s | ...'."""
    lines = ['| Rule | ' + ' | '.join(f'{name.capitalize()}, CPU s' for name in PASSES) + ' |',
             '|---' * (len(PASSES) + 1) + '|']
    lines += [f'| {name} | ' + ' | '.join(f'{value:.2f}' for value in passes) + ' |'
              for name, passes in seconds.items()]
    return '\n'.join(lines) + '\n'


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Time each rule (the four, and the rules of any --rules file) over a case set, one rule at '
                    'a time, twice; print the CPU seconds as a Markdown table. Writes nothing.')
    parser.add_argument('--cases', type=Path, default=evaluate.CASES, help='case set (default: cases.json)')
    parser.add_argument('--rules', type=Path, action='append', default=[], metavar='FILE.py',
                        help='a rules file to time beside the four; repeatable')
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        cases = load_cases(args.cases)
        evaluate.check_bare_requests(args.cases, cases)  # also loads the counter before any timing
        counter().lines_apart  # the counter's one-time vocabulary check, outside every timing
        rules, _ = load_rule_files(args.rules)
        print(f'rule_timing.py: timing {len(STRATEGIES) + len(rules)} rules on {len(cases)} cases', file=sys.stderr)
        print(table(time_rules(cases, {**STRATEGIES, **rules})), end='')
    except (CaseError, CounterError, RuleError) as error:
        print(f'rule_timing.py: {error}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    cli.run(main)
