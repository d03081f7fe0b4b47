"""Memory, and what must be forgotten: fill a managed and an append-only store, fill each question's memory block
three ways, and grade each block (docs/memory.md).

    .venv/bin/python memory_eval.py                    # memory-cases.json -> memory-result.json, then the table
    .venv/bin/python memory_eval.py --cases FILE --output FILE.json --format table --counter qwen-2.5
    .venv/bin/python memory_eval.py --cases FILE --stores DIR   # also keeps every store the run made in DIR

For each question, fresh stores (SQLite files in a temporary folder, memory_store.py) hold its user's events up to
the question's time. A fill offers lines ('- FACT') newest first and keeps each whose own count still fits the
question's facts quota; the block lists them oldest first. managed-all offers every current fact,
managed-relevant the current facts sharing a word with the question (strategies.words), append-all every fact
ever stored. Graded by exact text: recall, usefulness (lines holding a required fact, of lines sent), stale lines,
forgotten lines, memory tokens (the sum of the lines' own counts, as the memory lab defines them) and input
tokens (the whole request, counted by the lab's counter; one over the allowance is graded all the same, and the
table says so below it, as evaluate.py's does). The replay's stores, if the set has a replay, are sampled every 20
turns. With no options it re-records memory-result.json, but only from the set memory_cases.py writes (an edited
memory-cases.json gets its table and a note, and the recording is left alone); file sizes, which depend on SQLite,
go in the environment block only. It calls no model, and keeps no store once it ends unless --stores names a new or
empty folder, which then gets all of them (NN-QUESTION.managed.sqlite, .append.sqlite, replay.*) or none.
"""
import argparse
import hashlib
from pathlib import Path
import sqlite3

from common import HERE, LabError, run, tell
from lab_files import check_outputs, to_json, write_output
from memory_cases import MEMORY_CASES, load_memory_cases, memory_cases
from memory_store import FILLS, filled_requests, filled_stores, stores_folder
from runner import report_header
from scorer import by_group, memory_totals
from text import markdown_table, plain_number
from tokenizer import add_counter_option, choose_counter, counter
from views import COUNTED_BY, counter_note

# What is measured. Changing any of these changes the recorded report.
SAMPLE_EVERY = 20  # replay turns between two storage samples
MEMORY_RECORDING = HERE / 'memory-result.json'


def check_stores(keep: Path) -> None:
    """Refuse, before anything runs, a --stores that is not a new folder in an existing one or an empty folder."""
    try:
        usable = keep.parent.is_dir() and not keep.is_symlink() and (
            not keep.exists() or keep.is_dir() and not any(keep.iterdir()))
    except OSError as error:
        raise LabError(f'--stores {keep}: cannot be looked at: {error.strerror}') from None
    if not usable:
        raise LabError(f'--stores {keep}: must be a new folder in an existing one, or an empty folder (not a link); '
                       'it gets every store of the run and replaces nothing')


def replay_growth(replay: dict, folder: Path) -> tuple[list[dict], dict]:
    """(rows of each store every SAMPLE_EVERY turns of the replay, each store's file size in bytes at its end)."""
    events, samples = {event['turn']: event for event in replay['events']}, []  # turns increase: one event a turn
    managed, append_only = filled_stores(folder, 'replay', [], replay['user'])
    for turn in range(1, replay['turns'] + 1):
        if turn in events:
            managed.apply(replay['user'], events[turn]), append_only.apply(replay['user'], events[turn])
        if turn % SAMPLE_EVERY == 0:
            samples.append({'turn': turn, 'managed': managed.counts(), 'append_only': append_only.counts()})
    managed.close(), append_only.close()
    return samples, {'managed': managed.path.stat().st_size, 'append': append_only.path.stat().st_size}


def memory_report(path: Path, keep: Path | None = None) -> dict:
    """The report: the lab's header, the totals per fill and split, the rows, the replay's storage growth (null
    without a replay); the stores are kept in `keep` if given."""
    cases, sha256 = load_memory_cases(path)
    with stores_folder(keep) as folder:
        filled = filled_requests(cases, counter(), folder)
        growth, sizes = replay_growth(cases['replay'], folder) if 'replay' in cases else (None, None)
    rows = {fill: [row for _, _, row in made] for fill, made in filled.items()}
    header = report_header(path, sha256, [], 'memory_eval.py', 'memory_store.py', 'memory_cases.py')
    header['environment'] |= {'sqlite': sqlite3.sqlite_version, **({'replay_file_bytes': sizes} if sizes else {})}
    summary = {fill: by_group(rows[fill], 'split', memory_totals) for fill in FILLS}
    return {**header, 'fills': list(FILLS), 'summary': summary, 'questions': rows, 'storage_growth': growth}


def memory_table(report: dict) -> str:
    """The summary as a Markdown table, a row per fill and split."""
    rows = [[fill, split.replace('_', '-'), f"{s['required_found']} of {s['required_total']}",
             f"{s['useful_lines']} of {s['lines']}", str(s['stale_lines']), str(s['forgotten_lines']),
             plain_number(s['mean_memory_tokens']), plain_number(s['mean_input_tokens'])]
            for fill, splits in report['summary'].items() for split, s in splits.items()]
    header = ['Fill', 'Split', 'Required facts', 'Useful lines', 'Stale lines', 'Forgotten lines',
              'Mean memory tokens', 'Mean input tokens']
    over = [f"{fill} {split.replace('_', '-')}: {s['over_budget']} of {s['questions']}"
            for fill, splits in report['summary'].items() for split, s in splits.items() if s['over_budget']]
    below = f"\nRequests over the input allowance (graded all the same): {'; '.join(over)}.\n" if over else ''
    return markdown_table(header, rows) + below + counter_note(report, COUNTED_BY)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Fill memory blocks three ways from memory-cases.json and grade '
                                     f'them; with no options, re-record {MEMORY_RECORDING.name} (docs/memory.md).')
    parser.add_argument('--cases', type=Path, default=MEMORY_CASES, metavar='FILE',
                        help='memory case set (default: memory-cases.json)')
    parser.add_argument('--output', type=Path, metavar='FILE.json', help='write the report here')
    parser.add_argument('--stores', type=Path, metavar='DIR', help='keep the stores the run makes in DIR, a new or '
                        'empty folder')
    parser.add_argument('--format', choices=('json', 'table'), default='table', help='what goes to stdout')
    add_counter_option(parser)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    choose_counter(args.counter)
    output = MEMORY_RECORDING if not argv else args.output
    check_outputs([('--output', output), ('--stores', args.stores)], [('--cases', args.cases)])
    if args.stores:
        check_stores(args.stores)
    report = memory_report(args.cases, args.stores)
    if not argv and report['case_set_sha256'] != hashlib.sha256(to_json(memory_cases()).encode()).hexdigest():
        output = None  # never re-record from a set that is not the lab's, unless --output asks for it
        tell(f'{args.cases.name} is not the set memory_cases.py writes, so {MEMORY_RECORDING.name}, which records '
             'that set, is left as it is; to keep this report, add --output FILE.json', 'memory_eval.py')
    if output:
        write_output(output, to_json(report), 'memory report')
    print(memory_table(report) if args.format == 'table' else to_json(report), end='')
    return 0


if __name__ == '__main__':
    run(main)
