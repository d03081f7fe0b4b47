"""Put each strategy through each case and report which facts its request carries.

    .venv/bin/python evaluate.py                              # JSON report on stdout
    .venv/bin/python evaluate.py --format table               # the summary as a Markdown table
    .venv/bin/python evaluate.py --format table --group kind  # ... a row per kind of case instead of per split
    .venv/bin/python evaluate.py --cases my-cases.json        # evaluate another case set
    .venv/bin/python evaluate.py --output evaluation-result.json   # also record the report (atomically)
    .venv/bin/python evaluate.py --compare evaluation-result.json  # what changed against an older report
    .venv/bin/python evaluate.py --compare evaluation-result.json --summary-only   # ... only in the summaries
    .venv/bin/python evaluate.py --format turns               # which turns each rule kept, case by case
    .venv/bin/python evaluate.py --show dev-correction --strategy notes [--prompt] [--full]   # one request, as sent
    .venv/bin/python evaluate.py --rules field_rules.py --format table   # also a file's rules (rule_files.py)

A row per (strategy, case) says which required facts and which stale (replaced)
facts appear, character for character, in the selected messages; a fact the
notes block escaped still counts. So the report is about the request, not the
reply: nothing here calls a model (answer_check.py does). Selection and
counting have no randomness, so there is a single trial and no timing.

Beside the four rules the report holds, per case, the best possible selection
of whole turns (best_possible.py; it reads the labels, so it is no strategy).
The report's `turns` are 0-based indices into `history`; every view meant for
people (the table, --format turns, --show, --compare) says `turn N` from 1.

Alongside the results the report keeps the SHA-256 of the case file, of every
module whose change can change a row (CODE_FILES: case loading, the strategies,
the counter, the best possible search and the grader in this file) and of
tokenizer-manifest.json, which pins the tokenizer files the counter accepts.
With --rules, each file's rules get rows after the four (rule_files.py says
how they are run, counted and graded) and the report records each file's name
and SHA-256 under `rule_files`; without it the report has no such key and is
exactly what it was before rules files existed. The environment (Python
version) is recorded but not compared.

Expected mistakes (a malformed case set, an unprepared counter, an unreadable
report to compare with, an unwritable --output, a broken rules file) print one
line and exit 2, without a traceback; Ctrl-C exits 130 and says whether
--output was written.
"""
import argparse
import json
import os
from pathlib import Path
import platform
import sys

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

import best_possible
from case_set import SPLITS, CaseError, load_cases, read_json
from compare_reports import ReportError, check_report, compare
from lab_files import path_text, write_output
import request_view
from strategies import STRATEGIES, allowance, escape, render
from prepared_folder import sha256_file
from rule_files import RuleError, load_rule_files
from tokenizer import CounterError, count_request, counter

HERE = Path(__file__).resolve().parent
CASES = HERE / 'cases.json'
GRADER = 'exact substring match of required and stale facts, raw or escaped, in the selected messages'
PROGRESS_ABOVE = 100  # larger case sets report progress on stderr
# Every module whose change can change a row: reading the cases, choosing, counting, grading, the best possible.
CODE_FILES = ('case_set.py', 'strategies.py', 'tokenizer.py', 'best_possible.py', 'evaluate.py')
RULES_CODE_FILE = 'rule_files.py'  # how rules files' rules are run and counted; hashed only in a report with --rules


def grade(case: dict, selected: dict) -> dict:
    """One report row: which required and stale facts reached the selected messages."""
    text = '\n'.join(message['content'] for message in selected['messages'])

    def present(fact: str) -> bool:
        return fact in text or escape(fact) in text  # notes quote facts escaped

    reached = [fact for fact in case['required'] if present(fact)]
    row = {'case': case['id'], 'split': case['split'], 'kind': case['kind']}
    row.update({key: selected[key] for key in ('turns', 'notes', 'input_tokens')})
    row['within_budget'] = selected['input_tokens'] <= allowance(case)
    row['required_found'], row['required_total'] = len(reached), len(case['required'])
    row['missing'] = [fact for fact in case['required'] if fact not in reached]
    row['stale_included'] = [fact for fact in case['stale'] if present(fact)]
    return row


def summarize(rows: list[dict]) -> dict:
    """Totals for a list of rows.

    Two rows, one with 1 of 1 facts in 40 tokens and one with 0 of 2 in 51, give
    facts_found 1 of 3, fact_recall 0.333, complete_cases 1, mean_input_tokens 45.5.
    """
    facts = sum(row['required_total'] for row in rows)
    found = sum(row['required_found'] for row in rows)
    tokens = [row['input_tokens'] for row in rows]
    return {'cases': len(rows), 'facts_found': found, 'facts_total': facts, 'fact_recall': round(found / facts, 3),
            'complete_cases': sum(1 for row in rows if not row['missing']),
            'cases_with_stale_facts': sum(1 for row in rows if row['stale_included']),
            'over_budget': sum(1 for row in rows if not row['within_budget']),
            'mean_input_tokens': round(sum(tokens) / len(tokens), 1)}


def evaluate_cases(cases: list[dict], count=count_request, progress=None, rules: dict = STRATEGIES) -> dict:
    """Per-rule rows for every case, in case-set order, the rules in the order given."""
    rows = {name: [] for name in rules}
    for done, case in enumerate(cases, 1):
        for name, strategy in rules.items():
            rows[name].append(grade(case, strategy(case, count)))
        if progress:
            progress(done, len(cases))
    return rows


def report_progress(done: int, total: int) -> None:
    if done == total or done % max(1, total // 20) == 0:
        print(f'evaluate.py: {done} of {total} cases', file=sys.stderr, flush=True)


def check_bare_requests(path: Path, cases: list[dict], count=count_request) -> None:
    """Refuse a case whose request cannot fit even with no history: every strategy would exceed its budget."""
    for case in cases:
        needed = count(render(case, []))
        if needed > allowance(case):
            raise CaseError(f'{path}: case {case["id"]}: field budget allows {allowance(case)} input tokens, '
                            f'but the instructions and question alone need {needed}')


def code_hashes(with_rules: bool = False) -> dict[str, str]:
    """SHA-256 of each file of CODE_FILES (and rule_files.py with rules files), by name: what ties a report
    to the code that made its rows."""
    return {name: sha256_file(HERE / name) for name in (*CODE_FILES, *[RULES_CODE_FILE][:with_rules])}


def run(path: Path = CASES, rule_paths: list = ()) -> dict:
    """The full report for a case set: the four strategies, then the rules of each file of rule_paths."""
    path = Path(path)
    rules, files = load_rule_files(rule_paths)
    cases = load_cases(path)
    check_bare_requests(path, cases)
    progress = report_progress if len(cases) > PROGRESS_ABOVE else None
    rows = evaluate_cases(cases, count_request, progress, {**STRATEGIES, **rules})
    best = [best_possible.best_row(case, grade) for case in cases]
    return {
        'case_set': path_text(path.name),  # a name that is not UTF-8 cannot be written as JSON text
        'case_set_sha256': sha256_file(path),
        'code_sha256': code_hashes(bool(rule_paths)),
        **({'rule_files': files} if rule_paths else {}),  # no key at all without --rules: the report stays as it was
        'tokenizer_manifest_sha256': sha256_file(HERE / 'tokenizer-manifest.json'),
        'environment': {'python': platform.python_version(), 'implementation': platform.python_implementation()},
        'counter': counter().profile(),
        'trials': 1,
        'grader': GRADER,
        'summary': {name: by_group(strategy_rows, 'split') for name, strategy_rows in rows.items()},
        'cases': rows,
        'best_possible': {'label': best_possible.LABEL, 'summary': by_group(best, 'split', best_possible.summarize),
                          'cases': best},
    }


def to_json(report: dict) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + '\n'


def plain_number(value: float) -> str:
    """A mean as the table shows it: 61.0 -> '61', 51.3 -> '51.3', 123456.7 -> '123456.7'."""
    return f'{value:.1f}'.removesuffix('.0')


def by_group(rows: list[dict], group: str, totals=summarize) -> dict:
    """totals() of the rows of each value of `group`: splits in SPLITS order, kinds in case-set order."""
    values = [split for split in SPLITS if any(row['split'] == split for row in rows)] if group == 'split' \
        else list(dict.fromkeys(row[group] for row in rows))
    return {value: totals([row for row in rows if row[group] == value]) for value in values}


def grouped_summaries(report: dict, group: str) -> tuple[dict, dict]:
    """(per strategy, best possible) summary figures per split (as recorded) or per kind (from the rows)."""
    best = report.get('best_possible', {'cases': [], 'summary': {}})  # reports before it had none
    if group == 'split':
        return report['summary'], best['summary']
    return ({name: by_group(rows, group) for name, rows in report['cases'].items()},
            by_group(best['cases'], group, best_possible.summarize))


def table(report: dict, group: str = 'split') -> str:
    """The summary as the Markdown table the README shows, a row per strategy and split (or kind)."""
    lines = [f'| Strategy | {group.capitalize()} | Facts found | Complete cases | Cases with stale facts | '
             'Mean input tokens |',
             '|---|---|---|---|---|---|']
    strategies, best = grouped_summaries(report, group)
    for name, groups in strategies.items():
        for value, s in groups.items():
            lines.append(f"| {name} | {value.replace('_', '-')} | {s['facts_found']} of {s['facts_total']} | "
                         f"{s['complete_cases']} of {s['cases']} | {s['cases_with_stale_facts']} | "
                         f"{plain_number(s['mean_input_tokens'])} |")
    for value, s in best.items():
        searched = s['cases'] - s['not_searched']
        complete = f"{s['complete_cases']} of {searched}" + (f" ({s['not_searched']} not searched)"
                                                             if s['not_searched'] else '')
        mean = '-' if s['mean_input_tokens'] is None else plain_number(s['mean_input_tokens'])
        lines.append(f"| {best_possible.LABEL} | {value.replace('_', '-')} | {s['facts_found']} of "
                     f"{s['facts_total']} | {complete} | {s['cases_with_stale_facts']} | {mean} |")
    # Only a rules file's rule can exceed the allowance; the four never do, so their table has no such line.
    over = [f"{name} {value.replace('_', '-')}: {s['over_budget']} of {s['cases']}"
            for name, groups in strategies.items() for value, s in groups.items() if s.get('over_budget')]
    if over:
        lines += ['', f"Requests over the input allowance (graded all the same): {'; '.join(over)}."]
    return '\n'.join(lines) + '\n'


def write_report(path: Path, report: dict) -> None:
    write_output(path, to_json(report), 'report', CaseError)


def show(path: Path, case_id: str, names: list[str], prompt: bool = False, full: bool = False,
         colour: bool = False, rules: dict = STRATEGIES) -> str:
    """--show: the request each named rule builds for one case, message by message, or (prompt) as rendered.

    With every rule named (no --strategy) the best possible selection follows, in
    both views, so one command answers both "what did the rule send?" and "could
    any selection do better?".
    """
    cases = {case['id']: case for case in load_cases(path)}
    if case_id not in cases:
        raise CaseError(f'{path}: no case {case_id!r}; the case ids are: {", ".join(cases)}')
    case = cases[case_id]
    check_bare_requests(path, [case])
    titled = {name: rules[name](case, count_request) for name in names}
    where = f"{case['id']} ({case['split'].replace('_', '-')}, {case['kind']})"
    rows = {name: grade(case, selected) for name, selected in titled.items()}
    if len(names) == len(rules):
        row = best_possible.best_row(case, grade)
        rows[best_possible.LABEL] = row
        titled[best_possible.LABEL] = None if row['turns'] is None else \
            {'messages': render(case, row['turns']), 'turns': row['turns'], 'notes': 0,
             'input_tokens': row['input_tokens']}
    if prompt and len(titled) == 1:
        return counter().render(titled[names[0]]['messages'])
    views = []
    for name, selected in titled.items():
        if selected is None:
            views.append(f"{name} on {where}: not searched ({rows[name]['not_searched']})\n")
        elif prompt:
            views.append(f"=== {name}: {selected['input_tokens']} input tokens ===\n"
                         f"{counter().render(selected['messages'])}")
        else:
            views.append(request_view.show_request(case, f'{name} on {where}', selected, rows[name], grade,
                                                   full, colour))
    return ('' if prompt else '\n').join(views)


def colour_wanted() -> bool:
    """Colour only for a person at a terminal who has not set NO_COLOR."""
    return sys.stdout.isatty() and 'NO_COLOR' not in os.environ


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Run the four context-selection strategies (and the rules of any --rules file) on a case set '
                    'and grade which required and '
                    'stale facts reach each request. Prints the report as JSON by default.')
    parser.add_argument('--cases', type=Path, default=CASES, help='case set to evaluate (default: cases.json)')
    parser.add_argument('--format', choices=('json', 'table', 'turns'), default='json',
                        help='json: the full report (default); table: the summary as a Markdown table; '
                             'turns: per case, which turns each rule and the best possible selection kept')
    parser.add_argument('--group', choices=('split', 'kind'), default='split',
                        help='rows of the table: one per split (default) or one per kind of case, '
                             'e.g. per LoCoMo category')
    parser.add_argument('--output', type=Path,
                        help='also write the JSON report to this file (replaced whole; a symlink is followed, '
                             'a pipe or device written into)')
    parser.add_argument('--compare', type=Path, metavar='OLD.json',
                        help='print what changed against an older report; exit 0 if nothing did, 1 if something did')
    parser.add_argument('--summary-only', action='store_true',
                        help='with --compare: print only what changed in the summaries and identity hashes, '
                             'and count the changes case by case in one line')
    parser.add_argument('--show', metavar='CASE_ID',
                        help='print the request each strategy builds for this case, message by message, '
                             'then the best possible selection')
    parser.add_argument('--rules', type=Path, action='append', default=[], metavar='FILE.py',
                        help='also run the rules this file defines in RULES, after the four (repeatable; '
                             'see rule_files.py)')
    parser.add_argument('--strategy', metavar='NAME',
                        help=f'with --show: only this rule ({", ".join(STRATEGIES)}, or one from --rules)')
    parser.add_argument('--prompt', action='store_true',
                        help='with --show: print the exact text the counter renders (what the model receives)')
    parser.add_argument('--full', action='store_true', help='with --show: do not fold long messages')
    args = parser.parse_args(argv)
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


def shown_rules(strategy: str | None, rule_paths: list) -> tuple[list[str], dict]:
    """(the names --show shows, every rule by name) for --strategy and the --rules files."""
    rules = {**STRATEGIES, **load_rule_files(rule_paths)[0]}
    if strategy is not None and strategy not in rules:
        raise RuleError(f'--strategy {strategy}: no such rule; the rules are: {", ".join(rules)}')
    return ([strategy] if strategy is not None else list(rules)), rules


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        if args.show is not None:  # --show '' is a case id too, and an unknown one
            names, rules = shown_rules(args.strategy, args.rules)
            print(show(args.cases, args.show, names, args.prompt, args.full, colour_wanted(), rules), end='')
            return 0
        old = None
        if args.compare:  # a file holding null is no report either
            old = read_json(args.compare, 'report to compare with')
            check_report(args.compare, old)
        report = run(args.cases, args.rules)
        if args.output:
            write_report(args.output, report)
    except (CaseError, CounterError, ReportError, RuleError) as error:
        print(f'evaluate.py: {error}', file=sys.stderr)
        return 2
    try:
        return print_result(args, old, report)
    except KeyboardInterrupt:
        if not args.output:
            raise
        raise KeyboardInterrupt(f'the report was written to {args.output}, its printing cut short') from None


def print_result(args: argparse.Namespace, old: dict | None, report: dict) -> int:
    """Print the changes against old (exit 1 if any) or the report in the chosen format."""
    if old is not None:
        changes = compare(old, report, rows=not args.summary_only)
        print('\n'.join(changes) if changes else f'no change against {args.compare}')
        return 1 if changes else 0
    views = {'json': to_json, 'table': lambda report: table(report, args.group), 'turns': request_view.turn_map}
    print(views[args.format](report), end='')
    return 0


if __name__ == '__main__':
    cli.run(main, 'nothing was written')
