"""Text for people: numbers, counts, seconds, one-line escapes and excerpts, Markdown tables and turn numbers.
Standard library only.

    markdown_table(['a', 'bb'], [['xyz', '1']], pad=True)   # '| a   | bb |\n|-----|----|\n| xyz | 1  |\n'
    turn_runs([2, 3, 4, 6])                                   # ['3-5', '7']: turns count from 1 for people

Reports keep 0-based turn indices and raw text; only what a person reads passes through here. It reads, prints
and writes nothing.
"""
import itertools
import json
import time


def plain_number(value: float) -> str:
    """A mean as tables show it: 61.0 -> '61', 51.3 -> '51.3'."""
    return f'{value:.1f}'.removesuffix('.0')


def counted(number: int, noun: str) -> str:
    """counted(1, 'case') -> '1 case'; counted(1534, 'case') -> '1,534 cases'"""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def clipped(text: str, most: int) -> str:
    """Text of at most `most` characters, its end cut to '...' if longer: clipped('abcdef', 5) -> 'ab...'"""
    return text if len(text) <= most else text[:most - 3] + '...'


def excerpt(value) -> str:
    """A value as JSON, cut short, for an error message."""
    return clipped(json.dumps(value, ensure_ascii=False), 40)


def printable(text: str) -> str:
    """Text that shows as itself on one line, control, bidirectional and other invisible characters escaped:
    printable('a\\nb\\u202ec') -> 'a\\\\nb\\\\u202ec'; printable('café') -> 'café'"""
    return ''.join(char if char.isprintable() else char.encode('unicode_escape').decode('ascii') for char in text)


def markdown_table(header: list[str], rows: list[list[str]], pad: bool = False) -> str:
    """A Markdown table, as the module docstring shows, its columns padded to line up in a terminal if `pad`;
    a cell's `|` and invisible characters are escaped, so no name can end a cell or a row."""
    table = [[printable(cell).replace('|', '\\|') for cell in line] for line in [header, *rows]]
    widths = [max(len(line[column]) for line in table) if pad else 0 for column in range(len(header))]
    lines = ['| ' + ' | '.join(map(str.ljust, cells, widths)) + ' |' for cells in table]
    lines.insert(1, '|' + '|'.join('-' * (width + 2) if pad else '---' for width in widths) + '|')
    return '\n'.join(lines) + '\n'


def turn_runs(indices) -> list[str]:
    """0-based turn indices as people count them, consecutive ones as one run: [2, 3, 4, 6] -> ['3-5', '7']."""
    runs = [[index for _, index in run] for _, run in  # along a run, index minus place in the list stays the same
            itertools.groupby(enumerate(sorted(indices)), lambda pair: pair[1] - pair[0])]
    return [f'{run[0] + 1}' if len(run) == 1 else f'{run[0] + 1}-{run[-1] + 1}' for run in runs]


def seconds(started: float) -> str:
    """The time since `started` (time.monotonic) as progress lines give it: '12.3 s'."""
    return f'{time.monotonic() - started:.1f} s'
