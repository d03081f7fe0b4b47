"""Tests for budget_sweep.py under several counters in one run (--counter a,b,c).

    .venv/bin/python -m unittest -v test_budget_sweep_counters   (about half a minute; needs the counters prepared)

Each counter's report must be byte for byte the one a run with that counter alone writes, its table the one such
a run prints, and the picture a row of panels per counter. A counter not prepared skips, naming its command. Each
test is named after the failure it pins; outputs go to a temporary folder.
"""
import json
from pathlib import Path
import tempfile
import unittest

import budget_sweep
from test_support_fixtures import COUNTERS, HERE, counter_or_skip
from test_support_runs import lab_main
import tokenizer

ARGS = ('--cases', str(HERE / 'cases.json'), '--context-limits', '256,640', '--group', 'split')


class SeveralCountersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory()
        cls.runs = {}
        for names in (*COUNTERS, ','.join(COUNTERS)):
            output = Path(cls.folder.name) / f'{names}.json'
            status, out, _ = lab_main(budget_sweep, *ARGS, '--counter', names, '--output', str(output),
                                      '--format', 'table')
            cls.runs[names] = status, out, output.read_bytes() if output.exists() else None

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()
        tokenizer.choose_counter(tokenizer.DEFAULT)

    def setUp(self):
        for name in COUNTERS:
            counter_or_skip(self, name)

    def test_each_counters_report_and_table_are_those_of_a_run_with_that_counter_alone(self):
        status, table, together = self.runs[','.join(COUNTERS)]
        alone = [self.runs[name] for name in COUNTERS]
        self.assertEqual(status, 0)
        self.assertEqual([budget_sweep.to_json(report).encode() for report in json.loads(together)],
                         [written for _, _, written in alone])  # byte for byte, code hashes and counter too
        self.assertEqual(table, '\n'.join(out for _, out, _ in alone))
        self.assertEqual([report['counter'].get('name') for report in json.loads(together)],
                         [None, 'qwen-2.5', 'llama-3.1'])  # the default's profile, as recorded, has no name

    def test_the_picture_has_a_row_of_panels_per_counter_each_named(self):
        figure = budget_sweep.draw(json.loads(self.runs[','.join(COUNTERS)][2]))
        titles = [axes.get_title().split(' (')[0] for axes in figure.axes if axes.axison]
        self.assertEqual(titles, [f'{name}: {panel}' for name in COUNTERS
                                  for panel in ('all cases', 'dev', 'held_out')])
        self.assertTrue(figure.get_suptitle().endswith('cases.json, counted by gemma-4-e2b, qwen-2.5, llama-3.1'))

    def test_a_rules_files_rule_counts_with_each_counter_not_the_first_ones_turn_costs(self):
        # The rules process outlives a counter: what it kept of one counter's answers (a conversation's turn costs)
        # must not size the next counter's requests, or its selections go over budget where a run alone stays within.
        with tempfile.TemporaryDirectory() as folder:
            rules = Path(folder, 'rules.py')
            rules.write_text("from strategies import recent\n\nRULES = {'newest': recent}\n", encoding='utf-8')
            runs = {}
            for names in (*COUNTERS, ','.join(COUNTERS)):
                output = Path(folder, f'{names}.json')
                status, _, err = lab_main(budget_sweep, *ARGS, '--rules', str(rules), '--counter', names,
                                          '--output', str(output))
                self.assertEqual(status, 0, err)
                runs[names] = json.loads(output.read_text(encoding='utf-8'))
        points = [[point for point in report['points'] if point['rule'] == 'newest'] for report in
                  runs[','.join(COUNTERS)]]
        self.assertEqual(points, [[point for point in runs[name]['points'] if point['rule'] == 'newest']
                                  for name in COUNTERS])

    def test_a_counter_given_twice_is_refused_in_one_line(self):
        status, out, err = lab_main(budget_sweep, *ARGS, '--counter', 'qwen-2.5,qwen-2.5')
        self.assertEqual((status, out, err), (2, '', 'budget_sweep.py: --counter qwen-2.5,qwen-2.5: a counter is '
                                                     'given twice\n'))


class AgentFactsTest(unittest.TestCase):
    def test_which_turn_holds_a_fact_is_worked_out_under_each_counter_as_a_run_with_it_alone_does(self):
        # Llama 3's template drops the text beside a call: under it no turn holds the fact 'Reading it now.'
        for name in ('gemma-4-e2b', 'llama-3.1'):
            counter_or_skip(self, name)
        self.addCleanup(tokenizer.choose_counter, tokenizer.DEFAULT)
        case = next(case for case in json.loads((HERE / 'agent-cases.json').read_text(encoding='utf-8'))
                    if case['id'] == 'dev-agent-latest')
        case['messages'][2]['content'], case['required'] = 'Reading it now.', ['Reading it now.']
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'beside.json'
            path.write_text(json.dumps([case]), encoding='utf-8')
            alone = {name: budget_sweep.sweep_reports(path, [2048], {}, [], counters=[name])[0]
                     for name in ('gemma-4-e2b', 'llama-3.1')}
            for names in (['gemma-4-e2b', 'llama-3.1'], ['llama-3.1', 'gemma-4-e2b']):
                together = dict(zip(names, budget_sweep.sweep_reports(path, [2048], {}, [], counters=names)))
                self.assertEqual(together, alone, names)
        self.assertEqual([entry['facts_found'] for name in ('gemma-4-e2b', 'llama-3.1')
                          for entry in alone[name]['points'] if entry['rule'] == budget_sweep.BEST], [1, 0])


class CounterRefusalTest(unittest.TestCase):
    def test_a_request_a_counter_cannot_count_names_the_file_the_case_and_the_message_as_the_case_numbers_it(self):
        counter_or_skip(self, 'llama-3.1')
        self.addCleanup(tokenizer.choose_counter, tokenizer.DEFAULT)
        path = str(HERE / 'agent-cases.json')
        for names in ('llama-3.1', 'gemma-4-e2b,llama-3.1'):
            status, out, err = lab_main(budget_sweep, '--cases', path, '--context-limits', '512', '--counter', names)
            self.assertEqual((status, out, err.splitlines()[-1]), (2, '', f'budget_sweep.py: {path}: case '
                             'dev-agent-parallel: message 2: Llama 3\'s template raises "This model only supports '
                             'single tool-calls at once!" on 2 calls in one message'), names)


if __name__ == '__main__':
    unittest.main()
