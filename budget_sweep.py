"""Recall across budgets: every rule on every case at several context limits, as figures and as a picture.

    .venv/bin/python budget_sweep.py        # cases.json at DEFAULT_LIMITS -> budget-sweep.json and budget-sweep.png
    .venv/bin/python budget_sweep.py --cases locomo-cases.json --context-limits 1024,2048,4096,8192,16384 \\
        --rules field_rules.py --group kind --output locomo-sweep.json --plot locomo-sweep.png --format table

At each limit every case's budget.context_limit is replaced by it (its answer and margin tokens kept) and every
rule runs on every case: the four, each --rules file's and the best possible selection, all loaded once. Each
(limit, rule) point holds the figures evaluate.py reports for that rule (per split or kind too with --group), and
--plot draws them, the same figures giving the same bytes; a cell or point where a request sent a stale fact, went
over the allowance or was invalid (an agent case's, which reaches no fact) is marked. With several counters
(--counter gemma-4-e2b,qwen-2.5,llama-3.1) it sweeps under each in turn, the work no counter changes done once:
the JSON is the list of the reports each counter alone would give, the table one table each, the picture a row of
panels each. The JSON goes to stdout or --output (with no options, to the two files above), both or neither with
--plot, never over an input; progress goes to stderr. A limit or case set it cannot sweep is one line, exit 2, and
nothing written. It calls no model.
"""
import argparse
from contextlib import contextmanager
import gc
import io
from pathlib import Path
import time

import best_possible
from best_possible import BEST
from case_set import check_limits, check_reserved, load_case_set
from common import HERE, LabError, add_input_options, run, tell
from lab_files import check_outputs, to_json, write_output
from rule_files import add_timeout_option, load_rule_files
from runner import counting, report_header, run_rules
from scorer import POINT_TOTALS, by_group, totals
from shapes import allowance, at_limit
from strategies import RULES
from text import clipped, counted, markdown_table, printable
from prepared_folder import DEFAULT
from tokenizer import choose_counter, counter, counter_choice
from views import counter_note

# What the default run records: limits where the 12 cases' rules separate (their bare requests need up to 170).
DEFAULT_LIMITS = (192, 256, 384, 640, 768, 1024)
RECORDING = HERE / 'budget-sweep.json'
PICTURE = HERE / 'budget-sweep.png'
MAX_DIGITS = 9  # a context limit is below a billion tokens; longer digit strings are refused, not converted
# How the picture marks a point where some request carried a stale fact, went over the allowance, or was one a
# provider would refuse (agent cases only: evaluate.py's invalid_requests, graded as reaching no fact).
MARKS = {'cases_with_stale_facts': dict(marker='o', markersize=6, markerfacecolor='white', label='stale facts sent'),
         'over_budget': dict(marker='x', markersize=8, color='red', label='requests over the allowance'),
         'invalid_requests': dict(marker='s', markersize=6, markerfacecolor='none', color='black',
                                  label='invalid requests (no fact counted)')}
CELL_MARKS = (('cases_with_stale_facts', 'stale'), ('over_budget', 'over'), ('invalid_requests', 'invalid'))
# The picture: fixed size, resolution and font, so the same figures give the same bytes.
STYLE = {'font.family': 'DejaVu Sans', 'font.size': 9, 'svg.hashsalt': 'budget-sweep', 'svg.fonttype': 'path',
         'figure.dpi': 100, 'savefig.dpi': 100}
PANEL_INCHES = (5.4, 3.6)  # one panel's width and height
LEGEND_INCHES = 1.5  # the width kept for the legend, right of the panels
PANEL_COLUMNS = 3  # panels per row with --group
NO_DATES = {'png': {'Software': None}, 'svg': {'Date': None, 'Creator': None}}  # savefig metadata to drop
# Not measured, only how often the garbage collector runs during a sweep: its three generations' thresholds (Python's
# own are 700, 10, 10), the young one collected after this many new objects.
SWEEP_COLLECTION = (100_000, 50, 50)


class SweepError(LabError):
    """A limit or a case set the sweep cannot run on; the message is the one line the user sees."""


def parse_limits(text: str) -> list[int]:
    """The context limits of --context-limits, smallest first: parse_limits('1024,256') -> [256, 1024];
    parse_limits('256,0') and parse_limits('256,256') raise SweepError."""
    limits = []
    for part in map(str.strip, text.split(',')):
        if not part.isascii() or not part.isdigit() or len(part) > MAX_DIGITS or int(part) <= 0:
            raise SweepError(f'--context-limits: {clipped(part, MAX_DIGITS + 3)!r} is not a positive integer of at '
                             f'most {MAX_DIGITS} digits (give e.g. 256,512,1024)')
        if int(part) in limits:
            raise SweepError(f'--context-limits: {int(part)} is given twice')
        limits.append(int(part))
    return sorted(limits)


def point(limit: int, room: int, rule: str, rows: list[dict], group: str | None) -> dict:
    """One (limit, rule) point: totals() of its rows laid out as a point (scorer.POINT_TOTALS), and with a group the
    same per split or kind."""
    entry = {'context_limit': limit, 'allowance': room, 'rule': rule, **point_totals(rows)}
    if group:
        entry['groups'] = by_group(rows, group, point_totals)
    return entry


def point_totals(rows: list[dict]) -> dict:
    """totals() of rows as a point lays them out."""
    return totals(rows, POINT_TOTALS)


def sweep_report(path: Path, limits: list[int], rules: dict, files: list[dict], group: str | None = None,
                 progress=lambda done, started, cpu: None) -> dict:
    """The sweep's report for a case set with the chosen counter: where the figures come from, and the points of every
    rule (the four, then `rules`, then the best possible) at every limit, limit by limit."""
    return sweep_reports(path, limits, rules, files, group, progress)[0]


def sweep_reports(path: Path, limits: list[int], rules: dict, files: list[dict], group: str | None = None,
                  progress=lambda done, started, cpu: None, counters: list[str] = ()) -> list[dict]:
    """sweep_report() under each of `counters` in turn (none: the chosen one), each the report a run with that
    --counter alone makes: the cases and the rules, which no counter changes, are loaded once, and the rules' caches
    of each conversation serve every counter. Which turn holds which fact is worked out under each counter, since
    what a template writes decides it (Llama 3's drops an agent's text beside a call; a pair turn's are cached)."""
    started, cpu = time.perf_counter(), time.process_time()
    with collected_less():
        cases, case_set_sha256 = load_case_set(path)
        check_reserved(path, cases)
        with counting(path, cases):  # a request a counter cannot count: named by file, case, message
            for name in counters or [None]:  # every counter's refusal before any counter's work
                choose_counter(name) if name else None
                check_limits(path, cases, limits, counter())
            progress(f'{len(cases)} cases read and checked at every limit', started, cpu)
            reports = []
            for name in counters or [None]:
                choose_counter(name) if name else None
                note = f' counted by {name}' * bool(name)
                started, cpu = time.perf_counter(), time.process_time()
                facts = {case['id']: best_possible.turn_facts(case) for case in cases}  # the same at every limit
                progress(f'which turn holds which fact, for {len(cases)} cases{note}', started, cpu)
                points = [entry for limit in limits
                          for entry in limit_points(cases, limit, {**RULES, **rules}, facts, group, progress, note)]
                reports.append({**report_header(path, case_set_sha256, files, Path(__file__).name),
                                'context_limits': limits, 'group': group, 'points': points})
    return reports


@contextmanager
def collected_less():
    """A block in which the garbage collector runs less often (SWEEP_COLLECTION): a loaded case set, LoCoMo's millions
    of objects living for the run, was walked again by every full collection (on the README's sweep 0.35 s of the
    lab's 6.6 s of CPU, then 0.2 s, measured 2026-12-04 with gc.callbacks; freezing the loaded cases out of
    collections or pausing the collector while loading saved nothing more). Afterwards as before."""
    thresholds = gc.get_threshold()
    gc.set_threshold(*SWEEP_COLLECTION)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


def limit_points(cases: list[dict], limit: int, rules: dict, facts: dict, group: str | None, progress,
                 note: str) -> list[dict]:
    """The points of every rule, then the best possible, at one limit (no rules file may name a rule BEST)."""
    started, cpu = time.perf_counter(), time.process_time()
    limited = at_limit(cases, limit)
    room = allowance(limited[0])
    rows = {**run_rules(limited, rules, counter()),
            BEST: [best_possible.best_row(case, counter(), facts[case['id']]) for case in limited]}
    progress(f'context limit {limit} ({room} input tokens): {len(rows)} rules on {len(cases)} cases{note}',
             started, cpu)
    return [point(limit, room, name, rule_rows, group) for name, rule_rows in rows.items()]


def report_progress(done: str, started: float, cpu: float) -> None:
    """One progress line: what was done, since when (time.perf_counter) and from what CPU (time.process_time)."""
    tell(f'{done} in {time.perf_counter() - started:.1f} s ({time.process_time() - cpu:.1f} s CPU)', 'budget_sweep.py')


def sweep_table(report: dict) -> str:
    """The required facts each rule found at each limit, as a Markdown table (--format table): points of 'recent'
    at limits 256 and 384 (allowances 128 and 256) finding 4 and 6 of 14 give '| Rule | 128 | 256 |', '|---|---|---|',
    '| recent | 4 | 6 |', then a line saying what the figures are. A point where 2 cases sent a stale fact and 3
    requests went over the allowance reads '6 (2 stale, 3 over)'."""
    limits = report['context_limits']
    found = {(entry['rule'], entry['context_limit']): f"{entry['facts_found']:,}" + marked(entry)
             for entry in report['points']}
    rooms = {entry['context_limit']: entry['allowance'] for entry in report['points']}
    totals = {entry['facts_total'] for entry in report['points']}
    rows = [[rule, *(found[rule, limit] for limit in limits)]
            for rule in dict.fromkeys(entry['rule'] for entry in report['points'])]
    return markdown_table(['Rule', *(f'{rooms[limit]:,}' for limit in limits)], rows) + (
        f"\nRequired facts found of {', '.join(f'{total:,}' for total in sorted(totals))} in "
        f"{printable(report['case_set'])}{counter_note(report)}, at each input allowance (context limits "
        f"{', '.join(f'{limit:,}' for limit in limits)})" + ('; in brackets, the cases whose request carried a stale '
        'fact and the requests over the input allowance, graded all the same' if any(map(marked, report['points']))
        else '') + (', and the invalid requests, which reach no fact' if any(
            entry.get('invalid_requests') for entry in report['points']) else '') + '.\n')


def marked(entry: dict) -> str:
    """' (2 stale, 3 over, 1 invalid)' for a point with stale facts sent, requests over the allowance or invalid
    requests, else ''."""
    marks = [f'{entry[key]:,} {word}' for key, word in CELL_MARKS if entry.get(key)]
    return f" ({', '.join(marks)})" if marks else ''


def draw_panel(axes, report: dict, name: str, pick) -> None:
    """One panel, titled with its name and size: a line per rule over the allowances (pick(point): its figures), the
    best possible dashed; rules drawn on one line are named under the title and show through it, dashed in turn."""
    from matplotlib.ticker import NullLocator, PercentFormatter

    allowances = sorted({entry['allowance'] for entry in report['points']})
    colours, same = {}, {}  # rule -> its line's colour; percentages -> the rules drawn with them, in turn
    for rule in dict.fromkeys(entry['rule'] for entry in report['points']):
        entries = [entry for entry in report['points'] if entry['rule'] == rule]  # one at each allowance
        found = [100 * pick(entry)['facts_found'] / pick(entry)['facts_total'] for entry in entries]  # percent
        style = dict(color='black', linestyle='--', marker='') if rule == BEST else dict(marker='o', markersize=3)
        line, = axes.plot(allowances, found, label=rule, linewidth=1.4, clip_on=False, **style)
        under = same.get(tuple(found), [])  # the best possible comes last
        for index, other in enumerate([] if rule == BEST else under):  # a slot of 1 + len(under) each, this last
            axes.plot(allowances, found, color=colours[other], linewidth=1.4,
                      linestyle=(4 * index, (4, 4 * len(under))), label='_same', clip_on=False)
        colours[rule], same[tuple(found)] = line.get_color(), [*under, rule]
        for key, mark in MARKS.items():  # over the line, so a rule that overflows or sends stale facts shows it
            if points := [(entry['allowance'], y) for entry, y in zip(entries, found) if pick(entry).get(key)]:
                axes.plot(*zip(*points), **{'color': line.get_color(), **mark, 'label': f'_{key}'}, linestyle='',
                          clip_on=False)
    axes.set_xscale('log')
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xticks(allowances, [f'{value:,}' for value in allowances], fontsize=7)
    axes.set_ylim(0, 100)
    axes.yaxis.set_major_formatter(PercentFormatter(decimals=0))
    axes.grid(True, color='#dddddd', linewidth=0.6)
    size = pick(report['points'][0])
    axes.set_title(''.join([f"{name} ({counted(size['cases'], 'case')}, {counted(size['facts_total'], 'fact')})",
                            *(f"\n{' = '.join(rules)}" for rules in same.values() if len(rules) > 1)]), fontsize=9)


def draw(report: dict | list[dict]):
    """The picture of a sweep report: the whole set, then with a group one panel per split or kind; of several
    reports (one per counter), a row of those panels for each, its panels named after its counter."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    reports = report if type(report) is list else [report]
    panels = [panel for each in reports for panel in report_panels(each, len(reports) > 1)]
    columns = len(panels) // len(reports) if len(reports) > 1 else min(PANEL_COLUMNS, len(panels))
    rows = -(-len(panels) // columns)
    figure = Figure(figsize=(PANEL_INCHES[0] * columns + LEGEND_INCHES, PANEL_INCHES[1] * rows + 0.8),
                    layout='constrained')
    grid = figure.subplots(rows, columns, squeeze=False)
    for axes, (name, each, pick) in zip(grid.flat, panels):
        draw_panel(axes, each, name, pick)
    for axes in grid.flat[len(panels):]:
        axes.set_axis_off()
    for axes in grid[:, 0]:
        axes.set_ylabel('required facts found')
    first = reports[0]['points'][0]
    reserve = first['context_limit'] - first['allowance']
    for axes in grid[-1, :]:
        axes.set_xlabel(f'input allowance in tokens (context limit - {reserve:,}), log scale')
    # Right of the panels, clear of the title.
    handles = grid.flat[0].get_legend_handles_labels()[0]
    handles += [Line2D([], [], linestyle='', **{'color': 'black', **mark}) for key, mark in MARKS.items()
                if any(entry.get(key) for each in reports for entry in each['points'])]  # only marks it holds
    figure.legend(handles=handles, loc='outside right center', frameon=False)
    counted_by = f", counted by {', '.join(map(counter_name, reports))}" if len(reports) > 1 \
        else counter_note(reports[0])
    figure.suptitle(f"Required facts found at each input allowance: {reports[0]['case_set']}{counted_by}")
    return figure


def report_panels(report: dict, named: bool) -> list[tuple]:
    """(title, report, pick) of each panel of one report: all cases, then each split or kind; `named`: each title
    opens with the report's counter."""
    opening = f'{counter_name(report)}: ' if named else ''
    return [(f'{opening}all cases', report, lambda entry: entry)] + [
        (f'{opening}{value}', report, lambda entry, value=value: entry['groups'][value])
        for value in report['points'][0].get('groups', {})]


def counter_name(report: dict) -> str:
    """The name of the counter a report was made with (the default's profile, as recorded, holds none)."""
    return report.get('counter', {}).get('name', DEFAULT)


def picture(report: dict | list[dict], kind: str) -> bytes:
    """The picture (draw) as PNG or SVG bytes, the same bytes for the same figures."""
    import matplotlib

    with matplotlib.rc_context(STYLE):
        buffer = io.BytesIO()
        draw(report).savefig(buffer, format=kind, metadata=NO_DATES[kind])
    return buffer.getvalue()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_options(parser)
    parser.add_argument('--context-limits', metavar='L1,L2,...', default=','.join(map(str, DEFAULT_LIMITS)),
                        help='context limits to give every case, comma-separated (default: %(default)s)')
    add_timeout_option(parser)
    parser.add_argument('--group', choices=('split', 'kind'),
                        help='also give each point its figures per split or per kind (and a panel each in the picture)')
    parser.add_argument('--output', type=Path, metavar='FILE.json', help='write the JSON here instead of stdout')
    parser.add_argument('--plot', type=Path, metavar='FILE.png|FILE.svg', help='draw the points into this picture')
    parser.add_argument('--format', choices=('json', 'table'), default='json',
                        help='what goes to stdout: json, the points (default; not with --output), or table, the '
                             'required facts each rule found at each limit as a Markdown table')
    parser.add_argument('--counter', metavar='NAME[,NAME...]', type=counter_names, default=[DEFAULT],
                        help=f'count with this model\'s counter (default: {DEFAULT}); several, comma-separated, sweep '
                             'under each in one run: a JSON list of their reports, a table each, a row of panels each; '
                             'list names every counter (docs/counters.md)')
    return parser.parse_args(argv)


def counter_names(text: str) -> list[str]:
    """--counter's value: counter names, each once: 'qwen-2.5,llama-3.1' -> ['qwen-2.5', 'llama-3.1']."""
    names = [counter_choice(name.strip()) for name in text.split(',')]
    if len(set(names)) < len(names):
        raise SweepError(f'--counter {text}: a counter is given twice')
    return names


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    choose_counter(args.counter[0])
    record = not argv  # no options at all: the committed recording
    output, plot = (RECORDING, PICTURE) if record else (args.output, args.plot)
    limits = parse_limits(args.context_limits)
    kind = plot.suffix.lower().removeprefix('.') if plot else None  # Path('a.SVG') -> 'svg'
    if plot and kind not in NO_DATES:
        raise SweepError(f'--plot {plot}: the picture must be a .png or .svg file')
    check_outputs([('--output', output), ('--plot', plot)],
                  [('--cases', args.cases), *(('--rules', path) for path in args.rules)])
    rules, files = load_rule_files(args.rules, args.rule_timeout)
    reports = sweep_reports(args.cases, limits, rules, files, args.group, report_progress,
                            args.counter if len(args.counter) > 1 else [])
    report = reports if len(reports) > 1 else reports[0]  # one counter: its report, as it always was
    drawn = picture(report, kind) if plot else None  # drawn before anything is written
    written = [(output, to_json(report), 'sweep')] * bool(output) + [(plot, drawn, 'picture')] * bool(plot)
    if written:
        write_output(*written[0], *written[1:])  # both or neither
    if args.format == 'table' or record:  # a bare run says what it recorded
        print('\n'.join(map(sweep_table, reports)), end='')
    elif not output:
        print(to_json(report), end='')
    return 0


if __name__ == '__main__':
    run(main, 'nothing was written')
