"""Put every rule through every case and report which facts its request carries.

    .venv/bin/python evaluate.py                                    # JSON report on stdout
    .venv/bin/python evaluate.py --format table [--group kind]      # the summary as a Markdown table
    .venv/bin/python evaluate.py --format turns                     # which turns each rule kept, case by case
    .venv/bin/python evaluate.py --output evaluation-result.json    # also record the report (atomically)
    .venv/bin/python evaluate.py --compare evaluation-result.json [--summary-only]   # what changed since
    .venv/bin/python evaluate.py --show dev-correction --strategy notes [--prompt] [--full]   # one request, as sent
    .venv/bin/python evaluate.py --cases my-cases.json --rules field_rules.py   # another case set; a file's rules too
    .venv/bin/python evaluate.py --counter llama-3.1 --format table   # counted as Llama 3.1 receives the requests

A row per (rule, case) says which required and stale facts reach the request, by exact text (scorer.py):
it calls no model, so one trial. Beside the rules it holds each case's best possible selection (best_possible.py)
and the SHA-256 of the case file, of the code that can change a row and of tokenizer-manifest.json
(docs/reviewing.md). Any bad input, and an --output that is one of its inputs, is one line and exit 2; Ctrl-C or
SIGTERM exits 130 and says whether --output was written.
"""
import argparse
import os
from pathlib import Path
import sys

import best_possible
from case_set import check_fits, load_case_set, load_cases
from common import DEFAULT_CASES, LabError, add_input_options, run
from lab_files import check_outputs, output_help, read_json, to_json, write_output
from rule_files import RULE_TIMEOUT, add_timeout_option, load_rule_files
from runner import case_selections, counting, report_header, run_rules
from scorer import by_group
from strategies import RULES, chosen
from tokenizer import add_counter_option, choose_counter, counter
import views

GRADER = 'exact substring match of required and stale facts, raw or escaped, in the selected messages'
PROGRESS_ABOVE = 100  # larger case sets report progress on stderr


def report(path: Path = DEFAULT_CASES, rule_paths: list = (), rule_timeout: float = RULE_TIMEOUT) -> dict:
    """The full report for a case set: the four rules, then the rules of each file of rule_paths."""
    rules, files = load_rule_files(rule_paths, rule_timeout)
    cases, case_set_sha256 = load_case_set(path)
    with counting(path, cases):
        check_fits(path, cases, counter())
        rows = run_rules(cases, {**RULES, **rules}, counter(), 'evaluate.py' if len(cases) > PROGRESS_ABOVE else '')
        best = [best_possible.best_row(case, counter()) for case in cases]
    return {**report_header(path, case_set_sha256, files), 'trials': 1, 'grader': GRADER,
            'summary': {name: by_group(rule_rows, 'split') for name, rule_rows in rows.items()}, 'cases': rows,
            'best_possible': {'label': best_possible.LABEL, 'summary': by_group(best, 'split'), 'cases': best}}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_options(parser)
    parser.add_argument('--format', choices=('json', 'table', 'turns'), default='json',
                        help='json: the full report (default); table: the summary as a Markdown table; '
                             'turns: per case, which turns each rule and the best possible selection kept')
    parser.add_argument('--group', choices=('split', 'kind'), default='split', help='rows of the table: one per '
                        'split (default) or one per kind of case, e.g. per LoCoMo category')
    parser.add_argument('--output', type=Path,
                        help=output_help('also write the JSON report to this file', 'one of the inputs'))
    parser.add_argument('--compare', type=Path, metavar='OLD.json',
                        help='print what changed against an older report; exit 0 if nothing did, 1 if something did')
    parser.add_argument('--summary-only', action='store_true',
                        help='with --compare: print only what changed in the summaries and identity hashes, '
                             'and count the changes case by case in one line')
    parser.add_argument('--show', metavar='CASE_ID', help='print the request each rule builds for this case, '
                        'message by message, then the best possible selection')
    add_timeout_option(parser)
    parser.add_argument('--strategy', metavar='NAME',
                        help=f'with --show: only this rule ({", ".join(RULES)}, or one from --rules)')
    parser.add_argument('--prompt', action='store_true',
                        help='with --show: print the exact text the counter renders (what the model receives)')
    parser.add_argument('--full', action='store_true', help='with --show: do not fold long messages')
    add_counter_option(parser)
    args = parser.parse_args(argv)  # then each option that only goes with another is checked to come with it
    if args.compare and args.format != 'json':
        parser.error('--compare prints changes, not a table or a turn map; use it without --format')
    if args.summary_only and not args.compare:
        parser.error('--summary-only shortens --compare OLD.json; use it with --compare')
    if args.show is None and (args.strategy or args.prompt or args.full):
        parser.error('--strategy, --prompt and --full go with --show CASE_ID')
    if args.show is not None and (args.compare or args.output or args.format != 'json'):
        parser.error('--show prints one case; use it without --format, --output and --compare')
    if args.prompt and args.full:
        parser.error('--prompt prints the whole text already; --full is for the folded view')
    if args.group != 'split' and args.format != 'table':
        parser.error('--group shapes the table; use it with --format table')
    return args


def show(args: argparse.Namespace) -> str:
    """--show: one case's requests and rows (and, without --strategy, the best possible), laid out by views."""
    rules = {**RULES, **load_rule_files(args.rules, args.rule_timeout)[0]}
    if args.strategy is not None and args.strategy not in rules:
        raise LabError(f'--strategy {args.strategy}: no such rule; the rules are: {", ".join(rules)}')
    cases = {case['id']: case for case in load_cases(args.cases)}
    if (case := cases.get(args.show)) is None:
        raise LabError(f'{args.cases}: no case {args.show!r}; the case ids are: {", ".join(cases)}')
    rules = rules if args.strategy is None else {args.strategy: rules[args.strategy]}
    with counting(args.cases, [case]):
        check_fits(args.cases, [case], counter())
        selected, rows = case_selections(case, rules, counter())
        if args.strategy is None:  # then the best possible selection, made as best_row made it; None if not searched
            best = rows[best_possible.LABEL] = best_possible.best_row(case, counter())
            selected[best_possible.LABEL] = None if best['turns'] is None else chosen(case, counter(),
                                                                                     best['turns'])
    colour = sys.stdout.isatty() and 'NO_COLOR' not in os.environ  # for a person at a terminal only
    return views.show_requests(case, selected, rows, args.prompt, args.full, colour)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    choose_counter(args.counter)
    if args.show is not None:  # --show '' is a case id too, and an unknown one
        print(show(args), end='')
        return 0
    check_outputs([('--output', args.output)],
                  [('--cases', args.cases), ('--compare', args.compare), *(('--rules', path) for path in args.rules)])
    if args.compare:  # a report that is not one is refused before the run, which may take minutes
        views.check_report(args.compare, old := read_json(args.compare, 'report to compare with'))
    result = report(args.cases, args.rules, args.rule_timeout)
    if args.output:
        write_output(args.output, to_json(result), 'report')
    try:
        if args.compare:
            changes = views.compare(old, result, rows=not args.summary_only)
            print('\n'.join(changes) if changes else f'no change against {args.compare}')
            return 1 if changes else 0
        formats = {'json': to_json, 'table': lambda r: views.report_table(r, args.group), 'turns': views.turn_map}
        print(formats[args.format](result), end='')
        return 0
    except KeyboardInterrupt:
        if not args.output:
            raise
        raise KeyboardInterrupt(f'the report was written to {args.output}, its printing cut short') from None


if __name__ == '__main__':
    run(main, 'nothing was written')
