"""Tests for summary_table.py: its rows grade as evaluate.py grades (checked against evaluate.py's own report, made
through the rules process), its new columns count what they say, and the agent cases have no statuses; and the
tables recorded in summary-tables.json are what the shipped summary-recording.json replays to, byte for byte.

    .venv/bin/python -m unittest -v test_summary_table

The model is a pure fake recorded into memory, or the shipped recording; no socket is opened, nothing is written
outside a temporary folder.
"""
import hashlib
import json
from pathlib import Path
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from case_set import load_cases
import continuation
import langchain_summary
import summaries
from summaries import compact
import summary_record
import summary_table
from test_support_continuation import CONTINUATION_CASES as CASES
from test_support_fixtures import HERE
from test_support_runs import lab_main
from tokenizer import counter

AGENT = load_cases(summary_table.AGENT_CASES)


def inventing(messages, options):
    """A fake model that names a file no history holds."""
    return {'text': 'Edit src/invented_module.py next.', 'prompt_tokens': 1, 'completion_tokens': 1, 'elapsed_ms': 1}


def recorded(cases: list[dict]) -> dict:
    calls = {'model': {}, 'calls': {}}
    summary_record.record(cases, counter(), inventing, calls, lambda value: None,
                          lambda case, call: [compact(case, counter(), call),
                                              langchain_summary.summarised(case, counter(), call)])
    return calls['calls']


class Table(unittest.TestCase):
    def test_the_lab_rules_rows_total_what_evaluate_reports_for_them(self):
        run = subprocess.run([sys.executable, 'evaluate.py', '--cases', 'agent-cases.json', '--rules',
                              'agent_rules.py'], cwd=HERE, capture_output=True, text=True, check=True)
        summary = json.loads(run.stdout)['summary']
        lines = summary_table.table([('agent', AGENT, None)], counter(), recorded(AGENT)).splitlines()[2:]
        rows = {line.split(' | ')[1]: line.split(' | ')[2] for line in lines}
        for name, reported in (('recent', 'recent'), ('notes', 'notes'), ('clear-tool-results', 'clear-tool-results'),
                               ('trim_messages', 'trim-last-human')):
            found = sum(summary[reported][split]['facts_found'] for split in ('dev', 'held_out'))
            total = sum(summary[reported][split]['facts_total'] for split in ('dev', 'held_out'))
            self.assertEqual(rows[name], f'{found} of {total}', name)

    def test_a_summary_naming_a_file_no_history_holds_counts_once_a_summarised_case(self):
        calls = recorded(AGENT)
        rule = summary_table.rules(calls, 'agent', None)[summary_table.SUMMARY]
        results = [rule(case, counter()) for case in AGENT]
        summarised = sum('summary' in chosen for chosen, _ in results)
        asked = []  # every call the rule makes, asked of the model itself rather than replayed
        for case in AGENT:
            compact(case, counter(), lambda messages, options: asked.append(1) or inventing(messages, options))
        cells = summary_table.row('agent', 'x', AGENT, None, results)
        self.assertEqual(cells[4:9], ['-', '-', '-', str(summarised), str(len(asked))])
        self.assertGreater(summarised, 0)

    def test_langchains_summary_naming_a_file_no_history_holds_counts_as_fabricated_too(self):
        # Its selection carried no 'summary', so its row said 0 fabricated whatever its summaries invented.
        rule = summary_table.rules(recorded(AGENT), 'agent', None)[langchain_summary.NAME]
        results = [rule(case, counter()) for case in AGENT]
        inventing_requests = sum(any('src/invented_module.py' in (message['content'] or '')
                                     for message in chosen['messages']) for chosen, _ in results)
        self.assertEqual(summary_table.row('agent', 'x', AGENT, None, results)[7], str(inventing_requests))
        self.assertGreater(inventing_requests, 0)

    def test_statuses_are_counted_per_key_on_the_continuation_cases(self):
        keys = continuation.load_keys(continuation.KEYS, CASES)
        results = [(summary_table.recent(case, counter()), 0) for case in CASES]
        cells = summary_table.row('c', 'recent', CASES, keys, results)
        self.assertEqual(sum(map(int, cells[4:7])), sum(len(entry['statuses']) for entry in keys.values()))

    def test_on_the_continuation_cases_the_summary_row_is_the_fourth_generations_request_and_all_their_calls(self):
        keys = continuation.load_keys(continuation.KEYS, CASES)
        calls = {'model': {}, 'calls': {}}
        summary_record.record(CASES[:2], counter(), inventing, calls, lambda value: None,
                              lambda case, call: continuation.generations(case, keys[case['id']]['segments'],
                                                                          counter(), call))
        rule = summary_table.rules(calls['calls'], 'c', keys)[summary_table.SUMMARY]
        for case in CASES[:2]:
            made = continuation.generations(case, keys[case['id']]['segments'], counter(), inventing)
            self.assertEqual(rule(case, counter()), (made[-1][0], sum(told['calls'] for _, told in made)))



class Shipped(unittest.TestCase):
    """The shipped recording (a real model's, docs/summaries.md) and the tables recorded from it; no model runs."""

    def test_the_recorded_tables_are_remade_byte_for_byte_from_the_shipped_recording(self):
        environment = {name: value for name, value in os.environ.items() if name != summaries.RECORDING_ENV}
        with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, environment, clear=True):
            status, out, err = lab_main(summary_table, '--output', str(Path(folder) / 'tables.json'))
            fresh = (Path(folder) / 'tables.json').read_text(encoding='utf-8')
        self.assertEqual((status, err), (0, ''))
        self.assertEqual(fresh, summary_table.TABLES.read_text(encoding='utf-8'),
                         'summary-tables.json is out of date: re-record with '
                         '.venv/bin/python summary_table.py --output summary-tables.json')
        recorded = json.loads(fresh)
        self.assertEqual(out, 'Summaries by qwen2.5-coder-0.5b-instruct (build b11434-unknown; temperature 0.7, '
                              'top_p 0.8, top_k 20, repeat_penalty 1.1, seed 1), replayed from summary-recording.json\n'
                              + '\n'.join(recorded['rules']) + '\n\n' + '\n'.join(recorded['generations']) + '\n')
        self.assertEqual(recorded['model'], summaries.load(summaries.RECORDING)['model'])

    def test_the_recorded_tables_name_the_shipped_recordings_bytes_and_grade_every_identifier(self):
        recorded = json.loads(summary_table.TABLES.read_text(encoding='utf-8'))
        shipped = hashlib.sha256(summaries.RECORDING.read_bytes()).hexdigest()
        self.assertEqual(recorded['recording_sha256'], shipped)
        identifiers = sum(len(case['required']) for case in CASES)  # 41, counted from the cases, not the tables
        generations = [line.split(' | ') for line in recorded['generations'][2:6]]
        self.assertEqual([cells[0] for cells in generations], ['| 1', '| 2', '| 3', '| 4'])
        self.assertTrue(all(cells[1].endswith(f' of {identifiers}') for cells in generations))

    def test_docs_summaries_shows_the_recorded_tables_line_for_line(self):
        recorded = json.loads(summary_table.TABLES.read_text(encoding='utf-8'))
        docs = (HERE / 'docs' / 'summaries.md').read_text(encoding='utf-8').splitlines()
        missing = [line for line in recorded['rules'] + recorded['generations'] if line and line not in docs]
        self.assertEqual(missing, [],
                         'docs/summaries.md: paste the tables summary_table.py prints')

    def test_the_shipped_recording_is_the_pinned_real_model_and_no_call_in_it_failed(self):
        shipped = summaries.load(summaries.RECORDING)
        self.assertEqual((shipped['model']['model_id'], shipped['model']['server']['build']),
                         ('qwen2.5-coder-0.5b-instruct', 'b11434-unknown'))
        self.assertEqual([call['reply'] for call in shipped['calls'].values() if 'failed' in call['reply']], [])


if __name__ == '__main__':
    unittest.main()
