"""The summary rules' table (issue 42 §5): the seed's LLM-summary compaction beside the lab's rules on the continuation
cases and the agent cases, then the continuation cases' generation table, all replayed from the summary recording.

    .venv/bin/python summary_table.py            # summary-recording.json ($CONTEXT_LAB_SUMMARIES names another)
    .venv/bin/python summary_table.py --output summary-tables.json   # also record both tables (atomically)

Each rule's request is graded as evaluate.py grades it (scorer.graded_row: required facts by exact text, as the
counter renders them), with the new columns: statuses kept, dropped and reversed (continuation keys; '-' for the
agent cases, which have none), fabricated identifiers (in a summary, absent from the history), summary calls and
requests over the allowance. `trim_messages` is agent_rules.py's trim-last-human; SummarizationMiddleware is
langchain_summary.py's; best possible reads the labels. On the continuation cases the summary row is the request of
the last of the four generations (continuation.py), so that no source passes 2,000 tokens. It prints, and writes only
--output: the recording's sha256, its pin (the model, build and options) and both tables' lines, which
test_summary_table remakes byte for byte.
"""
import argparse
from pathlib import Path

from answer_model import model_name
from best_possible import best_row
import common
from case_set import load_cases
import continuation
import lab_files
import langchain_summary
from scorer import graded_row, totals
from strategies import notes, recent
import summaries
from summaries import compact
from text import markdown_table

AGENT_CASES = common.HERE / 'agent-cases.json'
TABLES = common.HERE / 'summary-tables.json'  # the tables recorded from the shipped recording
SUMMARY = 'llm-summary (seed 001)'
HEADER = ['Cases', 'Rule', 'Facts found', 'Complete cases', 'Statuses kept', 'Dropped', 'Reversed',
          'Fabricated identifiers', 'Summary calls', 'Over budget', 'Mean input tokens']


def rules(calls: dict, cases_name: str, keys: dict | None) -> dict:
    """The rules of the table, name -> function(case, count) -> (selection, summary calls). With continuation
    keys, the summary rule's request is the last generation's, and its calls all four generations'."""
    import agent_rules  # langchain-core: imported once the locked packages are known to be there (common.run)
    plain = {'recent': recent, 'notes': notes, 'clear-tool-results': agent_rules.RULES['clear-tool-results'],
             'trim_messages': agent_rules.RULES['trim-last-human']}
    made = {name: (lambda rule: lambda case, count: (rule(case, count), 0))(rule) for name, rule in plain.items()}

    def summary(case: dict, count) -> tuple[dict, int]:
        call = summaries.replaying(calls, case['id'], cases_name)
        if keys:
            told = continuation.generations(case, keys[case['id']]['segments'], count, call)
            return told[-1][0], sum(telemetry['calls'] for _, telemetry in told)
        chosen, telemetry = compact(case, count, call)
        return chosen, telemetry['calls']
    return {**made, SUMMARY: summary, langchain_summary.NAME: lambda case, count: langchain_summary.summarised(
        case, count, summaries.replaying(calls, case['id'], cases_name))}


def row(label: str, name: str, cases: list[dict], keys: dict | None, results: list[tuple[dict, int]]) -> list[str]:
    """One rule's row over the cases, from (selection, calls) per case."""
    figures = totals([graded_row(case, chosen) for case, (chosen, _) in zip(cases, results)])
    states = []
    for case, (chosen, _) in zip(cases, results):
        text = continuation.request_text(chosen)
        states += [continuation.status_of(text, key) for key in (keys or {}).get(case['id'], {}).get('statuses', ())]
    shown = [str(states.count(state)) if keys else '-' for state in ('kept', 'dropped', 'reversed')]
    made = sum(len(continuation.fabricated(chosen.get('summary', ''), continuation.history_text(case)))
               for case, (chosen, _) in zip(cases, results))
    return [label, name, *found(figures), *shown, str(made), str(sum(calls for _, calls in results)),
            str(figures['over_budget']), f'{figures["mean_input_tokens"]:.1f}']


def best(label: str, cases: list[dict], count) -> list[str]:
    figures = totals([best_row(case, count) for case in cases])
    return [label, 'best possible (reads the labels)', *found(figures), '-', '-', '-', '-', '0', '0',
            f'{figures["mean_input_tokens"]:.1f}']


def found(figures: dict) -> list[str]:
    """The facts found and complete cases of a group's figures (scorer.totals), as the table writes them."""
    return [f'{figures["facts_found"]} of {figures["facts_total"]}',
            f'{figures["complete_cases"]} of {figures["cases"]}']


def table(sets: list[tuple[str, list[dict], dict | None]], count, calls: dict) -> str:
    lines = []
    for label, cases, keys in sets:
        for name, rule in rules(calls, label, keys).items():
            lines.append(row(label, name, cases, keys, [rule(case, count) for case in cases]))
        lines.append(best(label, cases, count))
    return markdown_table(HEADER, lines)


def tables(count, recording: Path) -> dict:
    """Both tables replayed from a recording, as recorded: its sha256 and the pin it was made with, then each
    table's lines."""
    cases, agent = load_cases(continuation.CASES), load_cases(AGENT_CASES)
    keys = continuation.load_keys(continuation.KEYS, cases)
    recorded = summaries.load(recording)
    calls = recorded['calls']
    rules_table = table([(continuation.CASES.name, cases, keys), (AGENT_CASES.name, agent, None)], count, calls)
    return {'recording_sha256': lab_files.sha256_file(recording), 'model': recorded['model'],
            'rules': rules_table.splitlines(),
            'generations': continuation.report(cases, keys, count, calls, continuation.CASES.name).splitlines()}


def caption(model: dict, recording: Path) -> str:
    """Which model wrote the summaries, with what: 'Summaries by m (build b1; temperature 0.7, seed 1), replayed from
    r.json' for a pin of model id m, server build b1, options {'temperature': 0.7} and seeds [1, 2]."""
    build = model.get('server', {}).get('build')
    options = ', '.join(f'{name} {value}' for name, value in model['options'].items())
    return (f"Summaries by {model_name(model)} ({f'build {build}; ' if build else ''}{options}, "
            f"seed {model['seeds'][0]}), replayed from {recording.name}")


def main(argv: list[str]) -> int:
    from tokenizer import counter
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--output', type=Path,
                        help=lab_files.output_help('also record both tables as JSON', 'the recording'))
    output, recording = parser.parse_args(argv).output, summaries.recording_path()
    lab_files.check_outputs([('--output', output)], [('the recording', recording)])
    made = tables(counter(), recording)
    print('\n'.join([caption(made['model'], recording), *made['rules'], '', *made['generations']]))
    if output:
        lab_files.write_output(output, lab_files.to_json(made), 'summary tables')
    return 0


if __name__ == '__main__':
    common.run(main)
