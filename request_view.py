"""Views for people: one request message by message, and a map of the turns each rule kept.

    python evaluate.py --show dev-correction --strategy notes   # the request `notes` built, folded
    python evaluate.py --show dev-correction --full             # every strategy and the best possible, unfolded
    python evaluate.py --format turns                           # the turn map of every case

evaluate.py runs the strategies, counts and grades; this module only lays out
what it is handed, so every figure shown is one the report holds. Turns are
numbered from 1 here (`turn 3, user`), as in the notes block; the report's
`turns` stay 0-based indices into `history`. Output is plain text that also
reads as Markdown; colour is added only when the caller asks (evaluate.py does
when stdout is a terminal and NO_COLOR is unset). It writes nothing.
"""
from collections.abc import Callable
import textwrap

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

from strategies import allowance, as_messages
from tokenizer import counter

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


def turn_numbers(indices: list[int]) -> str:
    """0-based turn indices as people count them: [0, 2] -> 'turns 1, 3'; [1] -> 'turn 2'; [] -> 'no turns'."""
    if not indices:
        return 'no turns'
    return ('turn ' if len(indices) == 1 else 'turns ') + ', '.join(str(index + 1) for index in indices)


def paint(text: str, style: str, colour: bool) -> str:
    """ANSI-styled text when colour is on: paint('x', 'stale', True) -> '\\x1b[31mx\\x1b[0m'."""
    return f'\x1b[{STYLES[style]}m{text}\x1b[0m' if colour else text


def message_labels(turns: list[int], count: int, notes: int) -> list[str]:
    """Where each message of a request came from, for a request of `count` messages built from `turns`.

    message_labels([0, 2], 6, 0) -> ['system', 'turn 1, user', 'turn 1, assistant',
                                     'turn 3, user', 'turn 3, assistant', 'question, user']
    """
    history = [f'turn {index + 1}, {role}' for index in sorted(turns) for role in ('user', 'assistant')]
    if count != len(history) + 2:
        raise ValueError(f'a request of {count} messages cannot hold {len(turns)} turns')
    return ['system', *history, 'notes and question, user' if notes else 'question, user']


def request_labels(case: dict, selected: dict) -> list[str]:
    """message_labels() for a request laid out as the built-in strategies lay it out (system, kept turns in
    order, question); else each message by position and role, since a rule from a rules file may send anything.

    A request [user 'hi', assistant 'hello'] that is no such layout -> ['message 1, user', 'message 2, assistant']
    """
    messages, turns = selected['messages'], sorted(selected['turns'])
    history = [message for index in turns for message in as_messages(case['history'][index])]
    if len(messages) == len(history) + 2 and messages[0]['role'] == 'system' and messages[-1]['role'] == 'user' \
            and messages[1:-1] == history:
        return message_labels(turns, len(messages), selected['notes'])
    return [f"message {position}, {message['role']}" for position, message in enumerate(messages, 1)]


def display_lines(content: str, full: bool) -> list[str]:
    """Content wrapped for reading and, unless full, folded: first and last lines around '… N more lines …'."""
    lines = [wrapped for line in content.strip().split('\n')
             for wrapped in (textwrap.wrap(line, WRAP, break_on_hyphens=False) or [''])]
    if full or len(lines) <= FOLD_ABOVE:
        return lines
    hidden = len(lines) - FOLD_HEAD - FOLD_TAIL
    return [*lines[:FOLD_HEAD], f'… {hidden} more lines …', *lines[-FOLD_TAIL:]]


def quoted(facts: list[str]) -> str:
    """quoted(['a', 'b c']) -> '"a"; "b c"'; quoted([]) -> 'none'."""
    return '; '.join(f'"{fact}"' for fact in facts) or 'none'


def request_text(title: str, blocks: list[dict], overhead: int, row: dict, limit: int,
                 full: bool = False, colour: bool = False) -> str:
    """One request, message by message, then one line of figures.

    Each block is {'label', 'tokens', 'content', 'required', 'stale'}: where the
    message came from, its share of the count, its text and the facts it carries.
    `overhead` is what the request costs beyond its messages; `row` the graded report row.
    """
    out = [paint(title, 'title', colour)]
    for block in blocks:
        out += ['', f"[{block['label']}] {block['tokens']} tokens"]
        out += [paint(f'  {REQUIRED_MARK} required fact: "{fact}"', 'required', colour) for fact in block['required']]
        out += [paint(f'  {STALE_MARK} stale fact: "{fact}"', 'stale', colour) for fact in block['stale']]
        for line in display_lines(block['content'], full):
            folded = line.startswith('… ') and line.endswith(' more lines …') and not full
            out.append(paint(INDENT + line, 'fold', colour) if folded else (INDENT + line).rstrip())
    out += ['', f'[<bos> and the generation prompt] {overhead} tokens', '']
    shares = overhead + sum(block['tokens'] for block in blocks)
    if shares != row['input_tokens']:  # only a counter that cannot count piece by piece gets here
        out.append(f'(the message sizes add up to {shares}, not to the count: this counter is not additive)')
    out.append(f"found {row['required_found']} of {row['required_total']} · missing: {quoted(row['missing'])} · "
               f"stale sent: {quoted(row['stale_included'])} · {row['input_tokens']} of {limit} input tokens")
    return '\n'.join(out) + '\n'


def message_blocks(case: dict, selected: dict, grade: Callable) -> list[dict]:
    """Each message of a request: where it came from, its share of the count, its text, the facts it carries.

    A message's share is its piece plus the per-turn delimiters (tokenizer.Counter); the
    shares and the counter's fixed part add up to the request's count. The facts are
    what the report's grader (evaluate.grade, handed in) finds in that message alone.
    """
    tokens = counter()
    messages = selected['messages']
    labels = request_labels(case, selected)
    blocks = []
    for label, message in zip(labels, messages):
        row = grade(case, {'messages': [message], 'turns': [], 'notes': 0, 'input_tokens': 0})
        blocks.append({'label': label, 'tokens': tokens.per_turn + tokens.piece_size(message['role'], message['content']),
                       'content': message['content'],
                       'required': [fact for fact in case['required'] if fact not in row['missing']],
                       'stale': row['stale_included']})
    return blocks


def show_request(case: dict, title: str, selected: dict, row: dict, grade: Callable,
                 full: bool = False, colour: bool = False) -> str:
    """request_text() for a selection (`turns`, `notes`, `messages`) of a case and its graded row."""
    return request_text(title, message_blocks(case, selected, grade), counter().fixed, row, allowance(case),
                        full, colour)


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table padded so its columns also line up in a terminal.

    markdown_table(['a', 'bb'], [['xyz', '1']]) -> ['| a   | bb |', '|-----|----|', '| xyz | 1  |']
    """
    widths = [max(len(line[column]) for line in [header, *rows]) for column in range(len(header))]

    def line(cells: list[str]) -> str:
        return '| ' + ' | '.join(cell.ljust(width) for cell, width in zip(cells, widths)) + ' |'

    return [line(header), '|' + '|'.join('-' * (width + 2) for width in widths) + '|', *map(line, rows)]


def turn_columns(best: dict, kept_sets: list) -> list[tuple[str, list]]:
    """(header, one cell per row) for each turn, or for each run of alike turns in a long history.

    A turn's header is its number and its fact marks; a row's cell says whether
    that row kept it (None as a kept set: the row was not worked out).
    """
    columns = []
    for index in range(best['history_turns']):
        marks = (REQUIRED_MARK if index in best['fact_turns'] else '') + \
                (STALE_MARK if index in best['stale_turns'] else '')
        cells = [UNKNOWN if kept is None else KEPT if index in kept else LEFT_OUT for kept in kept_sets]
        columns.append((index, marks, cells))
    if best['history_turns'] <= MAP_FULL_UP_TO:
        return [(f'{index + 1}{marks}', cells) for index, marks, cells in columns]
    merged = []  # runs of turns with no fact and the same cell in every row become one column
    for index, marks, cells in columns:
        if merged and not marks and not merged[-1][2] and merged[-1][3] == cells:
            merged[-1][1] = index
        else:
            merged.append([index, index, marks, cells])
    return [(f'{first + 1}{marks}' if first == last else f'{first + 1}-{last + 1}', cells)
            for first, last, marks, cells in merged]


def case_map(best: dict, strategy_rows: dict[str, dict], label: str) -> str:
    """The turn map of one case: a row per strategy and the best-possible row, a column per turn."""
    named = [*strategy_rows.items(), (label, best)]
    kept_sets = [None if row['turns'] is None else set(row['turns']) for _, row in named]
    columns = turn_columns(best, kept_sets)
    rows = []
    for position, (name, row) in enumerate(named):
        turn_cells = [cells[position] for _, cells in columns]
        if row['turns'] is None:
            rows.append([name, *turn_cells, '', f'not searched: {row["not_searched"]}', ''])
        else:
            rows.append([name, *turn_cells, str(row.get('notes', 0)),
                         f"{row['required_found']} of {row['required_total']}", str(len(row['stale_included']))])
    title = f"{best['case']} ({best['split'].replace('_', '-')}, {best['kind']}), {best['history_turns']} turns"
    header = ['rule', *(heading for heading, _ in columns), 'notes', 'facts found', 'stale facts sent']
    return '\n'.join([title, '', *markdown_table(header, rows)])


def turn_map(report: dict) -> str:
    """Every case's turn map, in report order, after one line of legend."""
    by_case = {name: {row['case']: row for row in rows} for name, rows in report['cases'].items()}
    blocks = [MAP_LEGEND]
    for best in report['best_possible']['cases']:
        strategy_rows = {name: rows[best['case']] for name, rows in by_case.items()}
        blocks.append(case_map(best, strategy_rows, report['best_possible']['label']))
    return '\n\n'.join(blocks) + '\n'


if __name__ == '__main__':
    cli.run(cli.module_main('Show the request each strategy built, and the turn map of every case.',
                            'python evaluate.py --show dev-correction'))
