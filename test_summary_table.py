"""Tests for summary_table.py: its rows grade as evaluate.py grades (checked against evaluate.py's own report, made
through the rules process), its new columns count what they say, and the agent cases have no statuses.

    .venv/bin/python -m unittest -v test_summary_table

The model is a pure fake recorded into memory; no socket is opened, nothing is written.
"""
import json
from pathlib import Path
import subprocess
import sys
import unittest

from case_set import load_cases
import continuation
import langchain_summary
from summaries import compact
import summary_record
import summary_table
from tokenizer import count_request

HERE = Path(__file__).resolve().parent
AGENT = load_cases(summary_table.AGENT_CASES)
CASES = load_cases(continuation.CASES)


def inventing(messages, options):
    """A fake model that names a file no history holds."""
    return {'text': 'Edit src/invented_module.py next.', 'prompt_tokens': 1, 'completion_tokens': 1, 'elapsed_ms': 1}


def recorded(cases: list[dict]) -> dict:
    calls = {'model': {}, 'calls': {}}
    summary_record.record(cases, count_request, inventing, calls, lambda value: None,
                          lambda case, call: [compact(case, count_request, call),
                                              langchain_summary.summarised(case, count_request, call)])
    return calls['calls']


class Table(unittest.TestCase):
    def test_the_lab_rules_rows_total_what_evaluate_reports_for_them(self):
        run = subprocess.run([sys.executable, 'evaluate.py', '--cases', 'agent-cases.json', '--rules',
                              'agent_rules.py'], cwd=HERE, capture_output=True, text=True, check=True)
        summary = json.loads(run.stdout)['summary']
        lines = summary_table.table([('agent', AGENT, None)], count_request, recorded(AGENT)).splitlines()[2:]
        rows = {line.split(' | ')[1]: line.split(' | ')[2] for line in lines}
        for name, reported in (('recent', 'recent'), ('notes', 'notes'), ('clear-tool-results', 'clear-tool-results'),
                               ('trim_messages', 'trim-last-human')):
            found = sum(summary[reported][split]['facts_found'] for split in ('dev', 'held_out'))
            total = sum(summary[reported][split]['facts_total'] for split in ('dev', 'held_out'))
            self.assertEqual(rows[name], f'{found} of {total}', name)

    def test_a_summary_naming_a_file_no_history_holds_counts_once_a_summarised_case(self):
        calls = recorded(AGENT)
        rule = summary_table.rules(calls, 'agent', None)[summary_table.SUMMARY]
        results = [rule(case, count_request) for case in AGENT]
        summarised = sum('summary' in chosen for chosen, _ in results)
        asked = []  # every call the rule makes, asked of the model itself rather than replayed
        for case in AGENT:
            compact(case, count_request, lambda messages, options: asked.append(1) or inventing(messages, options))
        cells = summary_table.row('agent', 'x', AGENT, None, results)
        self.assertEqual(cells[4:9], ['-', '-', '-', str(summarised), str(len(asked))])
        self.assertGreater(summarised, 0)

    def test_langchains_summary_naming_a_file_no_history_holds_counts_as_fabricated_too(self):
        # Its selection carried no 'summary', so its row said 0 fabricated whatever its summaries invented.
        rule = summary_table.rules(recorded(AGENT), 'agent', None)[langchain_summary.NAME]
        results = [rule(case, count_request) for case in AGENT]
        inventing_requests = sum(any('src/invented_module.py' in (message['content'] or '')
                                     for message in chosen['messages']) for chosen, _ in results)
        self.assertEqual(summary_table.row('agent', 'x', AGENT, None, results)[7], str(inventing_requests))
        self.assertGreater(inventing_requests, 0)

    def test_statuses_are_counted_per_key_on_the_continuation_cases(self):
        keys = continuation.load_keys(continuation.KEYS, CASES)
        results = [(summary_table.recent(case, count_request), 0) for case in CASES]
        cells = summary_table.row('c', 'recent', CASES, keys, results)
        self.assertEqual(sum(map(int, cells[4:7])), sum(len(entry['statuses']) for entry in keys.values()))

    def test_on_the_continuation_cases_the_summary_row_is_the_fourth_generations_request_and_all_their_calls(self):
        keys = continuation.load_keys(continuation.KEYS, CASES)
        calls = {'model': {}, 'calls': {}}
        summary_record.record(CASES[:2], count_request, inventing, calls, lambda value: None,
                              lambda case, call: continuation.generations(case, keys[case['id']]['segments'],
                                                                          count_request, call))
        rule = summary_table.rules(calls['calls'], 'c', keys)[summary_table.SUMMARY]
        for case in CASES[:2]:
            made = continuation.generations(case, keys[case['id']]['segments'], count_request, inventing)
            self.assertEqual(rule(case, count_request), (made[-1][0], sum(told['calls'] for _, told in made)))


if __name__ == '__main__':
    unittest.main()
