"""Views of a report for people: the table, the turn map, one request as sent, and what changed.

    .venv/bin/python evaluate.py --format table                             # report_table
    .venv/bin/python evaluate.py --format turns                             # turn_map
    .venv/bin/python evaluate.py --show dev-correction --strategy notes     # show_requests, folded
    .venv/bin/python evaluate.py --compare evaluation-result.json           # compare: exit 0 no change, 1 changes

It only lays out what evaluate.py hands it (a report, or one case's selections and rows), so every figure shown is
one the run made; --show adds each message's share of the count from the counter. Turns count from 1 here
(`turns 3-15, 20`) while the report's stay 0-based; a message is named by its index in the request, from 0, as
refusals name it (`message 2, tool`). Plain text that also reads as Markdown, colour only when the
caller asks. It writes nothing.
"""
from itertools import accumulate, groupby
import json
from pathlib import Path
import textwrap

from best_possible import BEST
from common import LabError
from lab_files import ANY, COUNT, OBJECT, STRING, check_fields, list_of, or_null
from scorer import BEST_ROW_FIELDS, ROW_FIELDS, by_group, facts_in
from shapes import allowance, build_request, turn_messages
from strategies import check_additive
from text import clipped, counted, markdown_table, plain_number, printable, turn_runs
from tokenizer import agent_request, counter
from tool_formats import as_rendered

# What the views look like.
WRAP = 96  # display width of message content; the exact text is what --prompt prints
FOLD_ABOVE = 8  # content of more display lines than this is folded ...
FOLD_HEAD, FOLD_TAIL = 3, 2  # ... to its first and last lines
INDENT = '    '  # message content
MAP_FULL_UP_TO = 40  # a turn map of a longer history collapses runs of turns marked alike
KEPT, LEFT_OUT, UNKNOWN = 'x', '.', '?'  # turn map cells
REQUIRED_MARK, STALE_MARK = '+', '!'  # a message or turn holding a required / a stale fact
STYLES = {'title': '1', 'required': '32', 'stale': '31', 'fold': '2'}  # ANSI: bold, green, red, dim
MAP_LEGEND = (f'Turns are numbered from 1. `{KEPT}`: the turn is in the request; in the header, `{REQUIRED_MARK}`: '
              f'the turn holds a required fact, `{STALE_MARK}`: it holds a stale fact.')
INVALID = 'invalid'  # beside the facts found of a request a provider would refuse
AGENT_LEGEND = (f'`{INVALID}`: a provider would refuse the request (`--show` says why), so it carries no fact. Facts '
                'found and stale facts sent are the whole request\'s, the instructions and the question too.')
TABLE_HEADER = ['Strategy', '{group}', 'Facts found', 'Complete cases', 'Cases with stale facts', 'Mean input tokens']
MAX_LINE = 300  # characters of a --compare line; a longer one is cut
LIST_CHARS = 90  # a list of facts or turn runs shows what fits in this many characters and counts the rest
FACT_CHARS = 60  # a longer fact is cut to its start
COUNTED_BY = '\nToken figures counted by {}.\n'  # counter_note under a table of a report made with another counter
# What --compare reads in a row, and how each value must look (lab_files' kinds); any other field it only names.
ROW_VALUES = {**dict.fromkeys(('case', 'split', 'kind'), STRING),
              **dict.fromkeys(('missing', 'stale_included'), list_of(STRING, 'a list of facts')),
              **dict.fromkeys(('turns', 'fact_turns', 'stale_turns'), list_of(COUNT, 'a list of turn indices'))}
UNSEARCHED = ('turns', 'missing', 'stale_included')  # None in a best-possible row that was not searched
REPORT = {'cases': OBJECT, 'summary': OBJECT, 'best_possible': {'cases': ANY, 'summary': ANY}}  # what --compare reads


def counter_note(report: dict, form: str = ', counted by {}') -> str:
    """form filled with the counter's name for a report made with a counter other than the default (whose profile has
    no name), so that no table or picture of one model passes for Gemma's; else '': ', counted by llama-3.1'."""
    name = report.get('counter', {}).get('name')
    return form.format(name) if name else ''


class ReportError(LabError):
    """A file given to --compare is not an evaluate.py report; the message names the part that is off."""


def report_table(report: dict, group: str = 'split') -> str:
    """The Markdown table the README shows, a row per rule and split (or kind), each the totals of the rule's rows
    in that group (scorer.by_group, as the report's summary is made)."""
    rules = {name: by_group(rows, group) for name, rows in report['cases'].items()}
    best = by_group(report['best_possible']['cases'], group)
    agent = any('invalid_requests' in s for groups in rules.values() for s in groups.values())  # agent cases
    rows = [[name, value.replace('_', '-'), f"{s['facts_found']} of {s['facts_total']}",
             f"{s['complete_cases']} of {s['cases'] - s.get('not_searched', 0)}"  # the best possible's only
             + (f" ({s['not_searched']} not searched)" if s.get('not_searched') else ''),
             str(s['cases_with_stale_facts']), *[str(s.get('invalid_requests', '-'))][:agent],
             '-' if s['mean_input_tokens'] is None else plain_number(s['mean_input_tokens'])]
            for name, groups in [*rules.items(), (report['best_possible']['label'], best)]
            for value, s in groups.items()]
    header = [*TABLE_HEADER[:5], *['Invalid requests'][:agent], TABLE_HEADER[5]]
    text = markdown_table([cell.format(group=group.capitalize()) for cell in header], rows)
    # Only a rules file's rule can exceed the allowance; the four never do, so their table has no such line.
    over = [f"{name} {value.replace('_', '-')}: {s['over_budget']} of {s['cases']}"
            for name, groups in rules.items() for value, s in groups.items() if s.get('over_budget')]
    return text + (f"\nRequests over the input allowance (graded all the same): {printable('; '.join(over))}.\n"
                   if over else '') + counter_note(report, COUNTED_BY)


def turn_columns(best: dict, kept_sets: list) -> list[tuple[str, list]]:
    """(number and fact marks, a cell per row) for each turn, or each run of alike turns in a long history."""
    columns = [(index, REQUIRED_MARK * (index in best['fact_turns']) + STALE_MARK * (index in best['stale_turns']),
                [UNKNOWN if kept is None else KEPT if index in kept else LEFT_OUT for kept in kept_sets])
               for index in range(best['history_turns'])]  # a kept set None: the row was not worked out
    # A column per turn, but in a long history one per run of turns that hold no fact and are alike in every row.
    alone = best['history_turns'] <= MAP_FULL_UP_TO
    runs = [[*run] for _, run in groupby(columns, lambda column: column[0] if column[1] or alone else column[2])]
    return [(turn_runs(index for index, _, _ in run)[0] + run[0][1], run[0][2]) for run in runs]


def case_map(best: dict, rule_rows: dict[str, dict], label: str) -> str:
    """The turn map of one case: a row per rule and the best-possible row, a column per turn."""
    named = [*rule_rows.items(), (label, best)]
    columns = turn_columns(best, [None if row['turns'] is None else set(row['turns']) for _, row in named])
    rows = [[name, *(cells[position] for _, cells in columns),
             *(('', f'not searched: {row["not_searched"]}', '') if row['turns'] is None else
               (str(row.get('notes', 0)), f"{row['required_found']} of {row['required_total']}"
                + (f', {INVALID}' if row.get('invalid') else ''), str(len(row['stale_included']))))]
            for position, (name, row) in enumerate(named)]
    title = printable(f"{best['case']} ({best['split'].replace('_', '-')}, {best['kind']}), "
                      + counted(best['history_turns'], 'turn'))
    header = ['rule', *(heading for heading, _ in columns), 'notes', 'facts found', 'stale facts sent']
    return f'{title}\n\n' + markdown_table(header, rows, pad=True).rstrip('\n')


def turn_map(report: dict) -> str:
    """Every case's turn map, in report order, after one line of legend."""
    by_case = {name: {row['case']: row for row in rows} for name, rows in report['cases'].items()}
    maps = [case_map(best, {name: rows[best['case']] for name, rows in by_case.items()},
                     report['best_possible']['label']) for best in report['best_possible']['cases']]
    agent = any('invalid' in row for rows in report['cases'].values() for row in rows)
    legend = MAP_LEGEND + (' ' + AGENT_LEGEND) * agent
    return '\n\n'.join([legend + counter_note(report, COUNTED_BY).rstrip('\n'), *maps]) + '\n'


def paint(text: str, style: str, colour: bool) -> str:
    """ANSI-styled text when colour is on: paint('x', 'stale', True) -> '\\x1b[31mx\\x1b[0m'."""
    return f'\x1b[{STYLES[style]}m{text}\x1b[0m' if colour else text


def message_labels(case: dict, chosen: dict) -> list[str]:
    """Where each message came from: ['system', 'turn 1, user', ..., 'question, user'] for a request laid out
    as the four lay it out; else each message by its index in the request, from 0 as refusals count it
    (tool_formats.invalid: 'message 2 (tool) ...'), and role, since a rules file may send anything."""
    messages, turns = chosen['messages'], sorted(chosen['turns'])
    history = build_request(case, turns)[1:-1]  # the turns' messages, as the four lay them out
    if len(messages) == len(history) + 2 and messages[0]['role'] == 'system' and messages[-1]['role'] == 'user' \
            and messages[1:-1] == history:
        return ['system', *(f"turn {index + 1}, {message['role']}" for index in turns
                            for message in turn_messages(case['history'][index])),
                'notes and question, user' if chosen['notes'] else 'question, user']
    return [f"message {position}, {message['role']}" for position, message in enumerate(messages)]


def display_lines(content: str, full: bool, colour: bool = False) -> list[str]:
    """Content indented, wrapped and, unless full, folded: first and last lines around '… N more lines …'."""
    lines = [(INDENT + wrapped).rstrip() for line in content.strip().split('\n')
             for wrapped in (textwrap.wrap(line, WRAP, break_on_hyphens=False) or [''])]
    if full or len(lines) <= FOLD_ABOVE:
        return lines
    fold = paint(f'{INDENT}… {len(lines) - FOLD_HEAD - FOLD_TAIL} more lines …', 'fold', colour)
    return [*lines[:FOLD_HEAD], fold, *lines[-FOLD_TAIL:]]


def quoted(facts: list[str]) -> str:
    """quoted(['a', 'b c']) -> '"a"; "b c"'; quoted([]) -> 'none'."""
    return '; '.join(f'"{fact}"' for fact in facts) or 'none'


def request_text(case: dict, title: str, chosen: dict, row: dict, full: bool, colour: bool) -> str:
    """One request, message by message with each one's share of the count and its facts, then the figures."""
    count, out, messages = counter(), [paint(title, 'title', colour)], chosen['messages']
    sizes, fixed, own = shares(case, messages, row['input_tokens'])
    for position, (label, message, tokens) in enumerate(zip(message_labels(case, chosen), messages, sizes)):
        reached, stale = facts_in(case, [message])
        out += ['', f'[{label}] {tokens} tokens' + tool_parts(message) + not_sent(messages, position, tokens)]
        out += [paint(f'  {REQUIRED_MARK} required fact: "{fact}"', 'required', colour) for fact in reached]
        out += [paint(f'  {STALE_MARK} stale fact: "{fact}"', 'stale', colour) for fact in stale]
        out += display_lines(message['content'], full, colour)
    prefix = count.form['prefix'] + ' and ' if count.form['prefix'] else ''
    out += ['', f'[no system message sent: the template writes its own] {own} tokens'] if own else []
    out += ['', f'[{prefix}the generation prompt] {fixed} tokens', '']
    out.append(f"found {row['required_found']} of {row['required_total']} · missing: {quoted(row['missing'])} · "
               f"stale sent: {quoted(row['stale_included'])} · {row['input_tokens']} of {allowance(case)} input tokens"
               + (f" · invalid: {row['invalid']}" if row.get('invalid') else ''))
    return '\n'.join(out) + '\n'


def not_sent(messages: list[dict], position: int, tokens: int) -> str:
    """What of a message the counter's template does not write where it stands, for its label ('' if nothing): Llama
    3's text beside a call; a result of no tokens of its own, written in its call's turn (Gemma 4) or dropped: the
    template's prompt without the message tells which."""
    count, message = counter(), messages[position]
    if as_rendered(count.name, [message])[0] != message:
        return f' · its text is not sent: {count.name} drops it beside a call'
    if tokens or message['role'] != 'tool' or len(messages) == 1:
        return ''
    written = count.prompt(messages[:position] + messages[position + 1:]) != count.prompt(messages)
    return ' · written in the share of its call' if written else ' · not sent: the template drops it'


def shares(case: dict, messages: list[dict], whole: int) -> tuple[list[int], int, int]:
    """(each message's share of the count, the fixed part's, what a template writes for a system message not sent),
    refused unless they add up to the request's count. A pair request is summed from its messages' spans, as rules
    count it; an agent request, rendered whole, is split where each message's text starts (TokenCounter.shares)."""
    count = counter()
    if not agent_request(messages):
        sizes = [count.message_size(message['role'], message['content']) for message in messages]
        parts = (sizes, count.fixed, 0)
    else:
        prefix, head, *sizes, tail = count.shares(messages)
        parts = ([head, *sizes], prefix + tail, 0) if messages[0]['role'] == 'system' else (sizes, prefix + tail, head)
    check_additive(case, whole, sum(parts[0]) + parts[1] + parts[2])  # the shares shown must add up to it
    return parts


def tool_parts(message: dict) -> str:
    """What a message says besides its content, on its label's line: its calls, the call it answers, the tools.
    A call of read_file with {'path': 'a'} -> ' · calls c1 read_file {"path": "a"}'."""
    calls = [f"{call['id']} {call['function']['name']} {json.dumps(call['function']['arguments'], ensure_ascii=False)}"
             for call in message.get('tool_calls', ())]
    return printable(''.join([*(f' · calls {call}' for call in calls),
                              *[f" · answers {message.get('tool_call_id')}"][:message['role'] == 'tool'],
                              *[f" · declares {len(message.get('tools', ()))} tools"][:'tools' in message]]))


def show_requests(case: dict, chosen: dict, rows: dict, prompt: bool, full: bool, colour: bool) -> str:
    """--show: each selection of one case (None: the best possible, not searched) with its graded row, message by
    message or (prompt) as the counter renders it."""
    if prompt and len(chosen) == 1:
        return counter().prompt(next(iter(chosen.values()))['messages'])
    where = printable(f"{case['id']} ({case['split'].replace('_', '-')}, {case['kind']})")  # one line, as itself
    views = []
    for name, request in chosen.items():
        if request is None:
            views.append(f"{printable(name)} on {where}: not searched ({rows[name]['not_searched']})\n")
        elif prompt:
            views.append(f"=== {printable(name)}: {request['input_tokens']} input tokens ===\n"
                         + counter().prompt(request['messages']))
        else:
            views.append(request_text(case, f'{printable(name)} on {where}', request, rows[name], full, colour))
    return ('' if prompt else '\n').join(views)


def shortened(items: list[str], room: int = LIST_CHARS) -> tuple[list[str], int]:
    """(the first items that fit in room characters joined by ', ', how many did not); at least one is shown:
    shortened(['aaaa', 'bb', 'cc'], 8) -> (['aaaa', 'bb'], 1)"""
    ends = accumulate(len(item) + 2 for item in items)  # where each item and the ', ' after it end
    shown = items[:max(1, sum(end - 2 <= room for end in ends))]
    return shown, len(items) - len(shown)


def fact_list(facts: list[str]) -> str:
    """Facts for a line: ['a'] -> "['a']"; a long fact ends in '...' after FACT_CHARS characters, and facts
    past LIST_CHARS are counted instead: ['x' * 100] * 3 -> "['xxx...xxx...'] and 2 more"."""
    shown, rest = shortened([repr(clipped(fact, FACT_CHARS)) for fact in facts])
    return f"[{', '.join(shown)}]" + (f' and {rest} more' if rest else '')


def turn_numbers(indices: list[int] | None) -> str:
    """Turn indices in a line for people: [0, 2] -> 'turns 1, 3'; [1] -> 'turn 2'; [] -> 'no turns';
    None (not searched) -> 'no search'; past LIST_CHARS the runs are cut short: '..., (40 turns in all)'."""
    if not indices:
        return 'no search' if indices is None else 'no turns'
    shown, rest = shortened(turn_runs(indices))
    return (('turn ' if len(indices) == 1 else 'turns ') + ', '.join(shown)
            + (f', ... ({len(indices)} turns in all)' if rest else ''))


def row_changes(old: dict, new: dict) -> list[str]:
    """What changed in one (rule or best-possible, case) row, turns counted from 1: old missing ['x'] and new
    missing [] give ["facts gained: ['x']"]; old turns [2] and new turns [0, 2] give ['kept turn 3 -> turns 1, 3']."""
    # Each label names the facts in holder's field that are not in other's.
    out = [f'{label}: {fact_list(facts)}' for label, field, holder, other in (
        ('facts lost', 'missing', new, old), ('facts gained', 'missing', old, new),
        ('stale facts gone', 'stale_included', old, new), ('stale facts appeared', 'stale_included', new, old))
        if (facts := [fact for fact in holder[field] or [] if fact not in (other[field] or [])])]  # None: not searched
    turn_fields = {'turns': 'kept', 'fact_turns': 'required facts in', 'stale_turns': 'stale facts in'}
    return out + [f'{turn_fields[field]} {turn_numbers(before)} -> {turn_numbers(after)}' if field in turn_fields
                  else f'{field} {before} -> {after}'
                  for field in (*turn_fields, 'notes', 'input_tokens', 'within_budget', 'invalid', 'required_total',
                                'history_turns', 'not_searched', 'split', 'kind')
                  if (before := old.get(field)) != (after := new.get(field))]


def rows_changes(name: str, old_rows: list[dict], new_rows: list[dict]) -> list[str]:
    """One line per change between two lists of rows of one rule (or of the best possible), by case."""
    old_rows, new_rows = {row['case']: row for row in old_rows}, {row['case']: row for row in new_rows}
    both = old_rows.keys() & new_rows.keys()
    return [f'{name} {case_id}: {change}' for case_id in dict.fromkeys([*old_rows, *new_rows])
            for change in (row_changes(old_rows[case_id], new_rows[case_id]) if case_id in both
                           else ['case added' if case_id in new_rows else 'case removed'])]


def dict_changes(prefix: str, before: dict, after: dict, between: str = ': ') -> list[str]:
    """'{prefix}{key}{between}{old} -> {new}' for each key whose value differs."""
    return [f'{prefix}{key}{between}{before.get(key)} -> {after.get(key)}' for key in dict.fromkeys([*before, *after])
            if before.get(key) != after.get(key)]


def compare(old: dict, new: dict, rows: bool = True) -> list[str]:
    """Every difference between two reports except the environment, one line each; [] when equal. With rows=False
    (--summary-only) the changes case by case are counted in one last line instead."""
    lines, hidden = [], []  # hidden: the changes case by case that --summary-only counts
    names = [c.get('name', c.get('model')) if isinstance(c := report.get('counter'), dict) else c
             for report in (old, new)]
    if names[0] != names[1]:  # a default counter's profile has no name; every token figure differs for this alone
        lines.append(f'made with different counters: {names[0]} -> {names[1]}; token counts and selections differ')
    for key in ('case_set', 'case_set_sha256', 'code_sha256', 'tokenizer_manifest_sha256', 'rule_files', 'counter',
                'trials', 'grader'):
        before, after = old.get(key), new.get(key)
        objects = isinstance(before, dict) and isinstance(after, dict)  # then one line per key of the object
        lines += dict_changes(f'{key} ', before, after) if objects else dict_changes('', {key: before}, {key: after})
    parts = [(name, old['cases'].get(name), new['cases'].get(name), old['summary'].get(name, {}),
              new['summary'].get(name, {})) for name in dict.fromkeys([*old['cases'], *new['cases']])]
    parts.append((BEST, old['best_possible']['cases'], new['best_possible']['cases'],
                  old['best_possible']['summary'], new['best_possible']['summary']))
    for name, old_rows, new_rows, old_summary, new_summary in parts:
        if old_rows is None or new_rows is None:  # a rules file's rule run in one report only: one line
            lines.append(f"{name}: rule {'added' if old_rows is None else 'removed'}")
            continue
        (lines if rows else hidden).extend(rows_changes(name, old_rows, new_rows))
        for split in dict.fromkeys([*old_summary, *new_summary]):
            lines += dict_changes(f'{name} {split} summary: ', old_summary.get(split, {}), new_summary.get(split, {}),
                                  ' ')
    if hidden:
        lines.append(f'and {len(hidden)} changes case by case, not shown: run without --summary-only to see them')
    return [clipped(printable(line), MAX_LINE) for line in lines]  # U+202E or a newline in a name: escaped


def check_report(path: Path, report) -> None:
    """Refuse a file that is not an evaluate.py report, naming the first part that is off."""
    where = f'{path}: not an evaluate.py report'
    check_fields(where, report, REPORT, exact=False, error=ReportError)
    best = report['best_possible']  # its parts are checked as the rules' are
    for name, rows in [*((f'cases.{name}', rows) for name, rows in report['cases'].items()),
                       ('best_possible.cases', best['cases'])]:
        check_rows(where, name, rows, BEST_ROW_FIELDS if name == 'best_possible.cases' else ROW_FIELDS)
    for name, splits in [*((f'summary.{name}', splits) for name, splits in report['summary'].items()),
                         ('best_possible.summary', best['summary'])]:
        if not isinstance(splits, dict) or not all(isinstance(split, dict) for split in splits.values()):
            raise ReportError(f'{where}: field {name} must map each split to its figures')


def check_rows(where: str, name: str, rows, fields: tuple) -> None:
    """Refuse rows that lack one of `fields` or hold a value --compare cannot read (ROW_VALUES); a best-possible row
    (it has not_searched) holds None where it was not searched."""
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ReportError(f'{where}: field {name} must be a list of rows')
    spec = {field: ROW_VALUES.get(field, ANY) for field in fields}
    unsearched = spec | {field: or_null(spec[field]) for field in UNSEARCHED if field in spec}
    for index, row in enumerate(rows):
        check_fields(where, row, unsearched if 'not_searched' in row else spec, name=f'{name}[{index}]', exact=False,
                     error=ReportError)
