"""Put each strategy through each case and report which facts its request carries.

    python evaluate.py                              # JSON report on stdout
    python evaluate.py --format table               # the summary as a Markdown table
    python evaluate.py --format table --group kind  # ... a row per kind of case instead of per split
    python evaluate.py --cases my-cases.json        # evaluate another case set
    python evaluate.py --output evaluation-result.json   # also record the report (atomically)
    python evaluate.py --compare evaluation-result.json  # what changed against an older report
    python evaluate.py --format turns               # which turns each rule kept, case by case
    python evaluate.py --show dev-correction --strategy notes [--prompt] [--full]   # one request, as sent

A row per (strategy, case) says which required facts and which stale (replaced)
facts appear, character for character, in the selected messages; a fact the
notes block escaped still counts. So the report is about the request, not the
reply: nothing here calls a model (answer_check.py does). Selection and
counting have no randomness, so there is a single trial and no timing.

Beside the four rules the report holds, per case, the best possible selection
of whole turns (best_possible.py; it reads the labels, so it is no strategy).
The report's `turns` are 0-based indices into `history`; every view meant for
people (the table, --format turns, --show, --compare) says `turn N` from 1.

Alongside the results the report keeps hashes of its three inputs (the case
file, strategies.py, tokenizer-manifest.json), which ties a recording to the
exact code and data behind it. Expected mistakes (a malformed case set, an
unprepared counter, an unreadable report to compare with, an unwritable
--output) print one line and exit 2, without a traceback; Ctrl-C exits 130.
"""
import argparse
import json
import os
from pathlib import Path
import platform
import sys
import tempfile

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

import best_possible
from compare_reports import ReportError, check_report, compare
import request_view
from strategies import STRATEGIES, allowance, escape, render
from prepared_folder import sha256_file
from tokenizer import THINKING_MARKERS, CounterError, count_request, counter

HERE = Path(__file__).resolve().parent
CASES = HERE / 'cases.json'
CASE_FIELDS = ('id', 'split', 'kind', 'instructions', 'current', 'history', 'budget', 'required', 'stale')
BUDGET_FIELDS = ('context_limit', 'max_new_tokens', 'margin')
SPLITS = ('dev', 'held_out')  # reported separately, in this order
GRADER = 'exact substring match of required and stale facts, raw or escaped, in the selected messages'
PROGRESS_ABOVE = 100  # larger case sets report progress on stderr


class CaseError(ValueError):
    """The case set is malformed; the message names the file, the case and the field."""


def read_json(path: Path, what: str):
    """The JSON of an input file, or a CaseError naming the file (cli.read_json says how)."""
    return cli.read_json(path, what, CaseError)


def check_budget(where: str, budget) -> None:
    if not isinstance(budget, dict) or set(budget) != set(BUDGET_FIELDS):
        raise CaseError(f'{where}: field budget must be an object with exactly {list(BUDGET_FIELDS)}')
    for name in BUDGET_FIELDS:
        value = budget[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CaseError(f'{where}: field budget.{name} must be a non-negative integer, got {value!r}')
    if budget['context_limit'] - budget['max_new_tokens'] - budget['margin'] <= 0:
        raise CaseError(f'{where}: field budget leaves no input allowance '
                        '(context_limit - max_new_tokens - margin must be positive)')


def check_encodable(where: str, case: dict) -> None:
    """JSON can carry lone surrogates ("\\ud800") that no tokenizer or UTF-8 file accepts; name the field."""
    fields = [(name, case[name]) for name in ('id', 'split', 'kind', 'instructions', 'current')]
    fields += [(f'history[{i}].{role}', turn[role]) for i, turn in enumerate(case['history']) for role in turn]
    fields += [(f'{name}[{i}]', fact) for name in ('required', 'stale') if isinstance(case[name], list)
               for i, fact in enumerate(case[name]) if isinstance(fact, str)]
    for name, text in fields:
        try:
            text.encode('utf-8')
        except UnicodeEncodeError:
            raise CaseError(f'{where}: field {name} holds a lone surrogate, which is not text') from None


def check_case(where: str, case: dict) -> None:
    """Raise CaseError for the first thing wrong with one case; `where` already names file and case."""
    missing = [name for name in CASE_FIELDS if name not in case]
    extra = sorted(set(case) - set(CASE_FIELDS))
    if missing or extra:
        raise CaseError(f'{where}: fields must be exactly {list(CASE_FIELDS)}; '
                        f'missing {missing}, unexpected {extra}')
    for name in ('id', 'split', 'kind', 'instructions', 'current'):
        if not isinstance(case[name], str) or not case[name].strip():
            raise CaseError(f'{where}: field {name} must be a non-empty string, got {case[name]!r}')
    if case['split'] not in SPLITS:
        raise CaseError(f'{where}: field split must be one of {list(SPLITS)}, got {case["split"]!r}')
    if not isinstance(case['history'], list):
        raise CaseError(f'{where}: field history must be a list of {{"user", "assistant"}} objects')
    for index, turn in enumerate(case['history']):
        if not isinstance(turn, dict) or set(turn) != {'user', 'assistant'} \
                or not all(isinstance(turn[role], str) for role in ('user', 'assistant')):
            raise CaseError(f'{where}: field history[{index}] must be an object with exactly '
                            'the string fields user and assistant')
        if any(marker in turn['assistant'] for marker in THINKING_MARKERS):
            # The chat format would strip a thought channel out of a model turn, so it cannot be counted.
            raise CaseError(f'{where}: field history[{index}].assistant contains a thinking-channel marker '
                            f'{list(THINKING_MARKERS)}, which the counter does not cover')
    check_budget(where, case['budget'])
    check_encodable(where, case)
    for name in ('required', 'stale'):
        facts = case[name]
        if not isinstance(facts, list) or not all(isinstance(fact, str) and fact for fact in facts):
            raise CaseError(f'{where}: field {name} must be a list of non-empty strings')
    if not case['required']:
        raise CaseError(f'{where}: field required is empty; a case needs at least one required fact')
    said = [turn[role] for turn in case['history'] for role in ('user', 'assistant')]
    for name in ('required', 'stale'):
        for fact in case[name]:
            # A fact the conversation never states would look like a strategy failure.
            if not any(fact in text for text in said):
                raise CaseError(f'{where}: field {name}: fact {fact!r} does not occur in any message of the history')


def load_cases(path: Path) -> list[dict]:
    """Read and validate a case set; raise CaseError naming file, case and field on the first problem."""
    path = Path(path)
    cases = read_json(path, 'case set')
    if not isinstance(cases, list):
        raise CaseError(f'{path}: the top level must be a list of cases, got {type(cases).__name__}')
    if not cases:
        raise CaseError(f'{path}: the case set is empty')
    seen = set()
    for index, case in enumerate(cases):
        if not isinstance(case, dict):
            raise CaseError(f'{path}: case {index}: expected an object, got {type(case).__name__}')
        label = case.get('id') if isinstance(case.get('id'), str) and case.get('id') else f'at index {index}'
        where = f'{path}: case {label}'
        check_case(where, case)
        if case['id'] in seen:
            raise CaseError(f'{where}: field id is a duplicate; every case id must be unique')
        seen.add(case['id'])
    return share_equal_parts(cases)


def share_equal_parts(cases: list[dict]) -> list[dict]:
    """A copy of a checked case set in which equal texts, turns, histories and budgets are one object each.

    Parsed JSON holds its own copy of every string, so 1,534 LoCoMo cases that
    each carry one of ten 300-turn conversations would hold each conversation
    hundreds of times. In the copy, cases with the same conversation share one
    history list (copy[0]['history'] is copy[1]['history']). It is built from
    new objects only: a string kept from the parsed JSON would pin the memory
    around it, while with nothing kept all of it is freed and returned to the
    system (measured on LoCoMo: 298 MiB resident after loading becomes 42 MiB).
    The strategies never change a case; a caller that does must copy it first.
    """
    texts, turns, histories, budgets = {}, {}, {}, {}

    def one(text: str) -> str:
        if text not in texts:
            texts[text] = text.encode('utf-8').decode('utf-8')  # a new object; str(text) would be the old one
        return texts[text]

    shared = []
    for case in cases:
        history = tuple((one(turn['user']), one(turn['assistant'])) for turn in case['history'])
        if history not in histories:
            histories[history] = [turns.setdefault(pair, {'user': pair[0], 'assistant': pair[1]}) for pair in history]
        budget = tuple(case['budget'][name] for name in BUDGET_FIELDS)
        budgets.setdefault(budget, dict(zip(BUDGET_FIELDS, budget)))
        lean = {name: one(case[name]) for name in ('id', 'split', 'kind', 'instructions', 'current')}
        lean.update(history=histories[history], budget=budgets[budget],
                    required=[one(fact) for fact in case['required']], stale=[one(fact) for fact in case['stale']])
        shared.append(lean)
    return shared


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


def evaluate_cases(cases: list[dict], count=count_request, progress=None) -> dict:
    """Per-strategy rows for every case, in case-set order."""
    rows = {name: [] for name in STRATEGIES}
    for done, case in enumerate(cases, 1):
        for name, strategy in STRATEGIES.items():
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


def run(path: Path = CASES) -> dict:
    """The full report for a case set."""
    path = Path(path)
    cases = load_cases(path)
    check_bare_requests(path, cases)
    progress = report_progress if len(cases) > PROGRESS_ABOVE else None
    rows = evaluate_cases(cases, count_request, progress)
    best = [best_possible.best_row(case, grade) for case in cases]
    return {
        'case_set': path.name,
        'case_set_sha256': sha256_file(path),
        'strategies_sha256': sha256_file(HERE / 'strategies.py'),
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
    return '\n'.join(lines) + '\n'


def write_report(path: Path, report: dict) -> None:
    try:
        write_atomically(path, to_json(report))
    except OSError as error:
        raise CaseError(f'{path}: cannot write the report: {error.strerror}') from None


def write_atomically(path: Path, text: str) -> None:
    """Replace path with text through a temporary file beside it, so no reader ever sees half a file.

    An OSError (or a UnicodeEncodeError for text that is not valid Unicode) reaches the caller, who knows
    what to tell the user; the temporary file is gone either way.
    """
    path = Path(path)
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.', suffix='.tmp')
        with os.fdopen(handle, 'w', encoding='utf-8') as file:
            file.write(text)
        os.chmod(temporary, 0o644)  # mkstemp makes the file private; recorded files are meant to be read
        os.replace(temporary, path)
        temporary = None
    finally:
        if temporary:
            Path(temporary).unlink(missing_ok=True)


def show(path: Path, case_id: str, names: list[str], prompt: bool = False, full: bool = False,
         colour: bool = False) -> str:
    """--show: the request each named strategy builds for one case, message by message, or (prompt) as rendered.

    With all four strategies the best possible selection follows, so one command
    answers both "what did the rule send?" and "could any selection do better?".
    """
    cases = {case['id']: case for case in load_cases(path)}
    if case_id not in cases:
        raise CaseError(f'{path}: no case {case_id!r}; the case ids are: {", ".join(cases)}')
    case = cases[case_id]
    check_bare_requests(path, [case])
    selections = {name: STRATEGIES[name](case, count_request) for name in names}
    if prompt:
        if len(selections) == 1:
            return counter().render(selections[names[0]]['messages'])
        return ''.join(f"=== {name}: {selected['input_tokens']} input tokens ===\n"
                       f"{counter().render(selected['messages'])}" for name, selected in selections.items())
    where = f"{case['id']} ({case['split'].replace('_', '-')}, {case['kind']})"
    views = [request_view.show_request(case, f'{name} on {where}', selected, grade(case, selected), grade,
                                       full, colour) for name, selected in selections.items()]
    if len(selections) == len(STRATEGIES):
        row = best_possible.best_row(case, grade)
        title = f'{best_possible.LABEL} on {where}'
        if row['turns'] is None:
            views.append(f"{title}: not searched ({row['not_searched']})\n")
        else:
            selected = {'messages': render(case, row['turns']), 'turns': row['turns'], 'notes': 0}
            views.append(request_view.show_request(case, title, selected, row, grade, full, colour))
    return '\n'.join(views)


def colour_wanted() -> bool:
    """Colour only for a person at a terminal who has not set NO_COLOR."""
    return sys.stdout.isatty() and 'NO_COLOR' not in os.environ


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Run the four context-selection strategies on a case set and grade which required and '
                    'stale facts reach each request. Prints the report as JSON by default.')
    parser.add_argument('--cases', type=Path, default=CASES, help='case set to evaluate (default: cases.json)')
    parser.add_argument('--format', choices=('json', 'table', 'turns'), default='json',
                        help='json: the full report (default); table: the summary as a Markdown table; '
                             'turns: per case, which turns each rule and the best possible selection kept')
    parser.add_argument('--group', choices=('split', 'kind'), default='split',
                        help='rows of the table: one per split (default) or one per kind of case, '
                             'e.g. per LoCoMo category')
    parser.add_argument('--output', type=Path, help='also write the JSON report to this file (temp file, then rename)')
    parser.add_argument('--compare', type=Path, metavar='OLD.json',
                        help='print what changed against an older report; exit 0 if nothing did, 1 if something did')
    parser.add_argument('--show', metavar='CASE_ID',
                        help='print the request each strategy builds for this case, message by message, '
                             'then the best possible selection')
    parser.add_argument('--strategy', choices=list(STRATEGIES), help='with --show: only this strategy')
    parser.add_argument('--prompt', action='store_true',
                        help='with --show: print the exact text the counter renders (what the model receives)')
    parser.add_argument('--full', action='store_true', help='with --show: do not fold long messages')
    args = parser.parse_args(argv)
    if args.compare and args.format != 'json':
        parser.error('--compare prints changes, not a table or a turn map; use it without --format')
    if args.show is None and (args.strategy or args.prompt or args.full):
        parser.error('--strategy, --prompt and --full go with --show CASE_ID')
    if args.show is not None and (args.compare or args.output or args.format != 'json'):
        parser.error('--show prints one case; use it without --format, --output and --compare')
    if args.prompt and args.full:
        parser.error('--prompt prints the whole text already; --full is for the folded view')
    if args.group != 'split' and args.format != 'table':
        parser.error('--group shapes the table; use it with --format table')
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        if args.show is not None:  # --show '' is a case id too, and an unknown one
            names = [args.strategy] if args.strategy else list(STRATEGIES)
            print(show(args.cases, args.show, names, args.prompt, args.full, colour_wanted()), end='')
            return 0
        old = read_json(args.compare, 'report to compare with') if args.compare else None
        if old is not None:
            check_report(args.compare, old)
        report = run(args.cases)
        if args.output:
            write_report(args.output, report)
    except (CaseError, CounterError, ReportError) as error:
        print(f'evaluate.py: {error}', file=sys.stderr)
        return 2
    if old is not None:
        changes = compare(old, report)
        print('\n'.join(changes) if changes else f'no change against {args.compare}')
        return 1 if changes else 0
    views = {'json': to_json, 'table': lambda report: table(report, args.group), 'turns': request_view.turn_map}
    print(views[args.format](report), end='')
    return 0


if __name__ == '__main__':
    cli.run(main, 'nothing was written')
