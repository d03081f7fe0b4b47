"""What changed between two evaluate.py reports, one line per change, in reviewer's terms.

    .venv/bin/python evaluate.py --compare evaluation-result.json                  # exit 0: no change; 1: what changed
    .venv/bin/python evaluate.py --compare evaluation-result.json --summary-only   # only the summary figures

evaluate.py runs a fresh report and hands both reports to `compare`; this
module holds the comparison and the check that the older file is a report at
all. A line names the strategy (or the best possible selection), the case and
what moved, with turns counted from 1 as in every view meant for people:

    relevant dev-correction: stale facts appeared: ['We will use MySQL']
    recent dev-old-decision: kept turn 3 -> turns 1, 3
    recent conv-26-q7: kept turns 175-215 -> turns 170-215
    notes dev summary: facts_found 5 -> 6
    code_sha256 evaluate.py: 3f0c... -> 9a1b...

Consecutive turns are written as one run (`turns 3-15, 20`; request_view's turn
map heads its columns the same way). Lines stay short on real case sets: a long
list of facts or turns shows what fits and counts the rest, no line passes
MAX_LINE characters, and --summary-only leaves out the changes case by case.

The test that compares a fresh run with the recorded report uses the same
lines for its failure message. It uses the standard library only, and reads
and writes no file itself.
"""
import json
from pathlib import Path

# Every row of the report has these fields; --compare reads them from the older report.
ROW_FIELDS = ('case', 'split', 'kind', 'turns', 'notes', 'input_tokens', 'within_budget', 'required_found',
              'required_total', 'missing', 'stale_included')
# How long a line may grow: a LoCoMo row can keep hundreds of turns and miss dozens of facts.
MAX_LINE = 300  # characters; a longer line is cut
LIST_CHARS = 90  # a list of facts or turn runs shows what fits in this many characters and counts the rest
FACT_CHARS = 60  # a longer fact is cut to its start
# Every best-possible row has these (turns, input_tokens, found, missing and stale are null if not searched).
BEST_ROW_FIELDS = ('case', 'split', 'kind', 'history_turns', 'fact_turns', 'stale_turns', 'turns', 'input_tokens',
                   'required_found', 'required_total', 'missing', 'stale_included', 'not_searched')


class ReportError(ValueError):
    """A file given to --compare is not an evaluate.py report; the message names the part that is off."""


def shortened(items: list[str], room: int = LIST_CHARS) -> tuple[list[str], int]:
    """(the first items that fit in room characters joined by ', ', how many did not); at least one is shown.

    shortened(['aaaa', 'bb', 'cc'], 8) -> (['aaaa', 'bb'], 1)
    """
    shown, length = [], 0
    for item in items:
        if shown and length + 2 + len(item) > room:
            break
        length += (2 if shown else 0) + len(item)
        shown.append(item)
    return shown, len(items) - len(shown)


def fact_list(facts: list[str]) -> str:
    """Facts for a line: ['a'] -> "['a']"; a long fact ends in '...' after FACT_CHARS characters, and facts
    past LIST_CHARS are counted instead: ['x' * 100] * 3 -> "['xxx...xxx...'] and 2 more"."""
    quoted = [repr(fact if len(fact) <= FACT_CHARS else fact[:FACT_CHARS - 3] + '...') for fact in facts]
    shown, rest = shortened(quoted)
    return f"[{', '.join(shown)}]" + (f' and {rest} more' if rest else '')


def facts_delta(label: str, old: list[str], new: list[str]) -> list[str]:
    gone = [fact for fact in old if fact not in new]
    came = [fact for fact in new if fact not in old]
    return ([f'{label} gone: {fact_list(gone)}'] if gone else []) + \
        ([f'{label} appeared: {fact_list(came)}'] if came else [])


def turn_runs(indices) -> list[str]:
    """0-based turn indices as people count them, consecutive ones as one run: [2, 3, 4, 6] -> ['3-5', '7']."""
    runs = []  # [first, last] of each run of consecutive indices
    for index in sorted(indices):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return [f'{first + 1}' if first == last else f'{first + 1}-{last + 1}' for first, last in runs]


def turn_numbers(indices: list[int], room: int | None = None) -> str:
    """Turn indices in a line for people: [0, 2] -> 'turns 1, 3'; [1] -> 'turn 2'; [] -> 'no turns';
    range(2, 15) plus [19] -> 'turns 3-15, 20'. Past room characters the runs are cut short:
    turn_numbers([0, 2, 4, 6], 4) -> 'turns 1, 3, ... (4 turns in all)'."""
    if not indices:
        return 'no turns'
    runs = turn_runs(indices)
    shown, rest = shortened(runs, room) if room else (runs, 0)
    return (('turn ' if len(indices) == 1 else 'turns ') + ', '.join(shown)
            + (f', ... ({len(indices)} turns in all)' if rest else ''))


def people_turns(indices: list[int] | None) -> str:
    """Report turn indices in a line for people: [0, 2] -> 'turns 1, 3'; None (not searched) -> 'no search'."""
    return 'no search' if indices is None else turn_numbers(indices, LIST_CHARS)


def row_changes(old: dict, new: dict) -> list[str]:
    """What changed in one (strategy or best-possible, case) row, in reviewer's terms, turns counted from 1.

    Old missing ['x'] and new missing [] give ["facts gained: ['x']"]; old turns [2]
    and new turns [0, 2] give ['kept turn 3 -> turns 1, 3'].
    """
    out = []
    old_missing, new_missing = old['missing'] or [], new['missing'] or []  # None: the row was not searched
    lost = [fact for fact in new_missing if fact not in old_missing]
    gained = [fact for fact in old_missing if fact not in new_missing]
    out += [f'facts lost: {fact_list(lost)}'] if lost else []
    out += [f'facts gained: {fact_list(gained)}'] if gained else []
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


def header_changes(old: dict, new: dict) -> list[str]:
    """A line per changed identity field; a field holding an object (code_sha256, counter) gets one per key."""
    lines = []
    for key in ('case_set', 'case_set_sha256', 'strategies_sha256', 'code_sha256', 'tokenizer_manifest_sha256',
                'rule_files', 'counter', 'trials', 'grader'):
        before, after = old.get(key), new.get(key)
        if isinstance(before, dict) and isinstance(after, dict):
            lines += [f'{key} {name}: {before.get(name)} -> {after.get(name)}'
                      for name in dict.fromkeys([*before, *after]) if before.get(name) != after.get(name)]
        elif before != after:
            lines.append(f'{key}: {before} -> {after}')
    return lines


def compare(old: dict, new: dict, rows: bool = True) -> list[str]:
    """Every difference between two reports except the environment, one line each; [] when equal.

    With rows=False (--summary-only) the changes case by case are counted in one last line instead.
    No line is longer than MAX_LINE: lists are shortened first, and a line still longer (a very long case
    id) is cut and ends in '...'.
    """
    lines, hidden = header_changes(old, new), 0
    parts = [(name, old.get('cases', {}).get(name, []), new.get('cases', {}).get(name, []),
              old.get('summary', {}).get(name, {}), new.get('summary', {}).get(name, {}))
             for name in dict.fromkeys([*old.get('cases', {}), *new.get('cases', {})])]
    old_best, new_best = old.get('best_possible', {}), new.get('best_possible', {})
    parts.append(('best possible', old_best.get('cases', []), new_best.get('cases', []),
                  old_best.get('summary', {}), new_best.get('summary', {})))
    for name, old_rows, new_rows, old_summary, new_summary in parts:
        if name != 'best possible' and (name not in old.get('cases', {}) or name not in new.get('cases', {})):
            # A rules file's rule run in one report only: one line, not one per case and summary figure.
            lines.append(f"{name}: rule {'added' if name in new.get('cases', {}) else 'removed'}")
            continue
        changed = rows_changes(name, old_rows, new_rows)
        lines += changed if rows else []
        hidden += 0 if rows else len(changed)
        lines += summary_changes(name, old_summary, new_summary)
    if hidden:
        lines.append(f'and {hidden} changes case by case, not shown: run without --summary-only to see them')
    return [line if len(line) <= MAX_LINE else line[:MAX_LINE - 3] + '...' for line in lines]


def is_turn_list(value) -> bool:
    """Is value a list of 0-based turn indices, as a report row holds them? [0, 2] -> True; ['x'] -> False"""
    return isinstance(value, list) and all(type(index) is int and index >= 0 for index in value)


def json_kind(value) -> str:
    """What a parsed JSON value is, in JSON's words: None -> 'null', [] -> 'a list', 3.5 -> 'a number'."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return {dict: 'an object', list: 'a list', str: 'a string'}.get(type(value), 'a number')


def check_report(path: Path, report) -> None:
    """Refuse a file that is not an evaluate.py report, naming the first part that is off."""
    def wrong(what: str) -> ReportError:
        return ReportError(f'{path}: not an evaluate.py report ({what})')

    if not isinstance(report, dict):
        raise wrong(f'expected an object with cases and summary, got {json_kind(report)}')
    if not isinstance(report.get('cases'), dict) or not isinstance(report.get('summary'), dict):
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
    import cli  # standard library only, like this module

    cli.run(cli.module_main('What changed between two evaluate.py reports, in reviewer\'s terms.',
                            '.venv/bin/python evaluate.py --compare evaluation-result.json'))
