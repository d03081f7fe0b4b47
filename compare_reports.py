"""What changed between two evaluate.py reports, one line per change, in reviewer's terms.

    python evaluate.py --compare evaluation-result.json   # exit 0: nothing changed; exit 1: what changed

evaluate.py runs a fresh report and hands both reports to `compare`; this
module holds the comparison and the check that the older file is a report at
all. A line names the strategy (or the best possible selection), the case and
what moved, with turns counted from 1 as in every view meant for people:

    relevant dev-correction: stale facts appeared: ['We will use MySQL']
    recent dev-old-decision: kept turn 3 -> turns 1, 3
    notes dev summary: facts_found 5 -> 6

The test that compares a fresh run with the recorded report uses the same
lines for its failure message. It reads and writes no file itself.
"""
from pathlib import Path

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

import request_view

# Every row of the report has these fields; --compare reads them from the older report.
ROW_FIELDS = ('case', 'split', 'kind', 'turns', 'notes', 'input_tokens', 'within_budget', 'required_found',
              'required_total', 'missing', 'stale_included')
# Every best-possible row has these (turns, input_tokens, found, missing and stale are null if not searched).
BEST_ROW_FIELDS = ('case', 'split', 'kind', 'history_turns', 'fact_turns', 'stale_turns', 'turns', 'input_tokens',
                   'required_found', 'required_total', 'missing', 'stale_included', 'not_searched')


class ReportError(ValueError):
    """A file given to --compare is not an evaluate.py report; the message names the part that is off."""


def facts_delta(label: str, old: list[str], new: list[str]) -> list[str]:
    gone = [fact for fact in old if fact not in new]
    came = [fact for fact in new if fact not in old]
    return ([f'{label} gone: {gone}'] if gone else []) + ([f'{label} appeared: {came}'] if came else [])


def people_turns(indices: list[int] | None) -> str:
    """Report turn indices in a line for people: [0, 2] -> 'turns 1, 3'; None (not searched) -> 'no search'."""
    return 'no search' if indices is None else request_view.turn_numbers(indices)


def row_changes(old: dict, new: dict) -> list[str]:
    """What changed in one (strategy or best-possible, case) row, in reviewer's terms, turns counted from 1.

    Old missing ['x'] and new missing [] give ["facts gained: ['x']"]; old turns [2]
    and new turns [0, 2] give ['kept turn 3 -> turns 1, 3'].
    """
    out = []
    old_missing, new_missing = old['missing'] or [], new['missing'] or []  # None: the row was not searched
    lost = [fact for fact in new_missing if fact not in old_missing]
    gained = [fact for fact in old_missing if fact not in new_missing]
    out += [f'facts lost: {lost}'] if lost else []
    out += [f'facts gained: {gained}'] if gained else []
    out += facts_delta('stale facts', old['stale_included'] or [], new['stale_included'] or [])
    for field, label in (('turns', 'kept'), ('fact_turns', 'required facts in'), ('stale_turns', 'stale facts in')):
        if old.get(field) != new.get(field):
            out.append(f'{label} {people_turns(old.get(field))} -> {people_turns(new.get(field))}')
    for field in ('notes', 'input_tokens', 'within_budget', 'required_total', 'history_turns', 'not_searched',
                  'split', 'kind'):
        if old.get(field) != new.get(field):
            out.append(f'{field} {old.get(field)} -> {new.get(field)}')
    return out


def rows_changes(name: str, old_rows: list[dict], new_rows: list[dict]) -> list[str]:
    """One line per change between two lists of rows of one strategy (or of the best possible), by case."""
    old_rows, new_rows = {row['case']: row for row in old_rows}, {row['case']: row for row in new_rows}
    lines = []
    for case_id in dict.fromkeys([*old_rows, *new_rows]):
        if case_id not in new_rows:
            lines.append(f'{name} {case_id}: case removed')
        elif case_id not in old_rows:
            lines.append(f'{name} {case_id}: case added')
        else:
            lines += [f'{name} {case_id}: {change}' for change in row_changes(old_rows[case_id], new_rows[case_id])]
    return lines


def summary_changes(name: str, old: dict, new: dict) -> list[str]:
    """One line per changed summary figure of one strategy (or of the best possible), by split."""
    lines = []
    for split in dict.fromkeys([*old, *new]):
        before, after = old.get(split, {}), new.get(split, {})
        for field in dict.fromkeys([*before, *after]):
            if before.get(field) != after.get(field):
                lines.append(f'{name} {split} summary: {field} {before.get(field)} -> {after.get(field)}')
    return lines


def compare(old: dict, new: dict) -> list[str]:
    """Every difference between two reports except the environment, one line each; [] when equal."""
    lines = []
    for key in ('case_set', 'case_set_sha256', 'strategies_sha256', 'code_sha256', 'tokenizer_manifest_sha256',
                'rule_files', 'counter', 'trials', 'grader'):
        if old.get(key) != new.get(key):
            lines.append(f'{key}: {old.get(key)} -> {new.get(key)}')
    for name in dict.fromkeys([*old.get('cases', {}), *new.get('cases', {})]):
        if name not in old.get('cases', {}) or name not in new.get('cases', {}):
            # A rules file's rule run in one report only: one line, not one per case.
            lines.append(f"{name}: rule {'added' if name in new.get('cases', {}) else 'removed'}")
            continue
        lines += rows_changes(name, old.get('cases', {}).get(name, []), new.get('cases', {}).get(name, []))
        lines += summary_changes(name, old.get('summary', {}).get(name, {}), new.get('summary', {}).get(name, {}))
    old_best, new_best = old.get('best_possible', {}), new.get('best_possible', {})
    lines += rows_changes('best possible', old_best.get('cases', []), new_best.get('cases', []))
    lines += summary_changes('best possible', old_best.get('summary', {}), new_best.get('summary', {}))
    return lines


def is_turn_list(value) -> bool:
    """Is value a list of 0-based turn indices, as a report row holds them? [0, 2] -> True; ['x'] -> False"""
    return isinstance(value, list) and all(type(index) is int and index >= 0 for index in value)


def check_report(path: Path, report) -> None:
    """Refuse a file that is not an evaluate.py report, naming the first part that is off."""
    def wrong(what: str) -> ReportError:
        return ReportError(f'{path}: not an evaluate.py report ({what})')

    if not isinstance(report, dict) or not isinstance(report.get('cases'), dict) \
            or not isinstance(report.get('summary'), dict):
        raise wrong('expected an object with cases and summary')
    for name, rows in report['cases'].items():
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise wrong(f'cases.{name} must be a list of rows')
        for index, row in enumerate(rows):
            absent = [field for field in ROW_FIELDS if field not in row]
            if absent:
                raise wrong(f'cases.{name}[{index}] lacks {absent}')
            for field in ('case', 'split', 'kind'):
                if not isinstance(row[field], str):
                    raise wrong(f'cases.{name}[{index}].{field} must be a string')
            for field in ('missing', 'stale_included'):
                if not isinstance(row[field], list) or not all(isinstance(fact, str) for fact in row[field]):
                    raise wrong(f'cases.{name}[{index}].{field} must be a list of facts')
            if not is_turn_list(row['turns']):
                raise wrong(f'cases.{name}[{index}].turns must be a list of turn indices')
    for name, splits in report['summary'].items():
        if not isinstance(splits, dict) or not all(isinstance(split, dict) for split in splits.values()):
            raise wrong(f'summary.{name} must map each split to its figures')
    best = report.get('best_possible', {'cases': [], 'summary': {}})  # reports before it had none
    if not isinstance(best, dict) or not isinstance(best.get('cases'), list) \
            or not isinstance(best.get('summary'), dict):
        raise wrong('best_possible must be an object with cases and summary')
    for index, row in enumerate(best['cases']):
        absent = [field for field in BEST_ROW_FIELDS if not isinstance(row, dict) or field not in row]
        if absent:
            raise wrong(f'best_possible.cases[{index}] lacks {absent}')
        if not isinstance(row['case'], str) or not all(isinstance(row[field], (list, type(None)))
                                                       for field in ('turns', 'missing', 'stale_included')):
            raise wrong(f'best_possible.cases[{index}] must name its case and list its turns and facts')
        for field in ('turns', 'fact_turns', 'stale_turns'):
            if not (is_turn_list(row[field]) or (field == 'turns' and row[field] is None)):
                raise wrong(f'best_possible.cases[{index}].{field} must be a list of turn indices')


if __name__ == '__main__':
    cli.run(cli.module_main('What changed between two evaluate.py reports, in reviewer\'s terms.',
                            'python evaluate.py --compare evaluation-result.json'))
