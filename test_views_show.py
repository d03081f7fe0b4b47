"""Tests for --show and --prompt (views.py): the requests each rule sends, message by message, for people.

    .venv/bin/python -m unittest -v test_views_show.py   (about 10 s)

Expected outputs are written out in full, by hand: the views are deterministic. Message sizes are held to the
official template's count (test_support_oracle); the README's excerpt is checked against what the
command prints. The table, the turn map, colour and --compare's lines are test_views.py's. Files are only ever
written into temporary directories.
"""
import copy
import json
from pathlib import Path
import re
import tempfile
import textwrap
import unittest

import agent_rules
from case_set import load_cases
from strategies import RULES, build_request, notes
from test_support_fixtures import DEV_CORRECTION_NOTES, HERE, result, shipped_cases, user, whole_count
from test_support_oracle import NO_ORACLE, OFFICIAL_TEMPLATE, official_count, official_render
from test_support_views import evaluate_once, show_case
import tokenizer
from tokenizer import CounterError, counter
from prepared_folder import DEFAULT

SIZE_LINE = re.compile(r'^\[[^\]\n]+\] (\d+) tokens$', re.MULTILINE)  # '[turn 2, user] 12 tokens'; content is indented
AGENT_SIZE_LINE = re.compile(r'^\[[^\]\n]+\] (\d+) tokens(?: · .*)?$', re.MULTILINE)  # and '· calls c1 ...' after

NOTES_ON_DEV_CORRECTION = '''\
notes on dev-correction (dev, corrected decision)

[system] 20 tokens
    Answer only from the conversation. If a fact is missing, say so.

[notes and question, user] 86 tokens
  + required fact: "Switch to PostgreSQL instead of MySQL."
  ! stale fact: "We will use MySQL"
''' + textwrap.indent(DEV_CORRECTION_NOTES, '    ') + '''

[<bos> and the generation prompt] 4 tokens

found 1 of 1 · missing: none · stale sent: "We will use MySQL" · 110 of 256 input tokens
'''

# What `--prompt` must print for notes on dev-correction: the Gemma 4 chat format, written out by hand.
NOTES_PROMPT_ON_DEV_CORRECTION = '''\
<bos><|turn>system
Answer only from the conversation. If a fact is missing, say so.<turn|>
<|turn>user
''' + DEV_CORRECTION_NOTES + '''<turn|>
<|turn>model
'''


class ShowTest(unittest.TestCase):
    def test_show_prints_what_notes_sent_in_dev_correction_message_by_message(self):
        result = evaluate_once('--show', 'dev-correction', '--strategy', 'notes')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertEqual(result.stdout, NOTES_ON_DEV_CORRECTION)

    def test_readme_shows_what_notes_sent_in_dev_correction(self):
        self.assertIn(f'```text\n{NOTES_ON_DEV_CORRECTION}```\n', (HERE / 'README.md').read_text(encoding='utf-8'))

    def test_show_without_a_strategy_ends_with_the_best_possible_request(self):
        result = evaluate_once('--show', 'dev-correction')
        self.assertEqual(result.returncode, 0, result.stderr)
        titles = [line for line in result.stdout.splitlines() if ' on dev-correction ' in line]
        self.assertEqual(titles, [f'{name} on dev-correction (dev, corrected decision)'
                                  for name in [*RULES, 'best possible (reads the labels)']])
        self.assertIn(NOTES_ON_DEV_CORRECTION, result.stdout)
        self.assertTrue(result.stdout.endswith('[turn 2, user] 12 tokens\n'
                                               '  + required fact: "Switch to PostgreSQL instead of MySQL."\n'
                                               '    Switch to PostgreSQL instead of MySQL.\n\n'
                                               '[turn 2, assistant] 10 tokens\n'
                                               '    Switched to PostgreSQL.\n\n'
                                               '[question, user] 11 tokens\n'
                                               '    Which database will we use?\n\n'
                                               '[<bos> and the generation prompt] 4 tokens\n\n'
                                               'found 1 of 1 · missing: none · stale sent: none · '
                                               '57 of 256 input tokens\n'), result.stdout[-600:])

    def test_prompt_prints_exactly_the_text_the_model_receives(self):
        result = evaluate_once('--show', 'dev-correction', '--strategy', 'notes', '--prompt')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertEqual(result.stdout, NOTES_PROMPT_ON_DEV_CORRECTION)

    @unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)
    def test_prompt_is_what_the_official_template_renders_and_counts_110_tokens(self):
        result = evaluate_once('--show', 'dev-correction', '--strategy', 'notes', '--prompt')
        self.assertEqual(result.returncode, 0, result.stderr)
        messages = notes(shipped_cases()['dev-correction'], counter())['messages']
        self.assertEqual(result.stdout, official_render(messages))
        self.assertEqual(official_count(messages), 110)

    def test_unknown_case_id_exits_2_with_one_line_listing_the_ids(self):
        for case_id in ('dev-typo', ''):  # an empty id is an unknown id, not a missing --show
            with self.subTest(case_id=case_id):
                result = evaluate_once('--show', case_id)
                self.assertEqual((result.returncode, result.stdout), (2, ''))
                self.assertEqual(result.stderr, f"evaluate.py: {HERE / 'cases.json'}: no case {case_id!r}; the case "
                                                'ids are: ' + ', '.join(shipped_cases()) + '\n')

    def test_show_reads_the_case_set_given_with_cases_and_folds_long_messages(self):
        case = copy.deepcopy(shipped_cases()['dev-old-decision'])
        case['budget']['context_limit'] = 2048  # room for the long log turn
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'big.json'
            path.write_text(json.dumps([case]), encoding='utf-8')
            result = evaluate_once('--cases', str(path), '--show', 'dev-old-decision', '--strategy', 'recent')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        folded = result.stdout
        # What --full prints, laid out here rather than by a second run (each run loads the counter again).
        full = show_case(case, {'recent': RULES['recent']}, full=True)
        # Expected lines come from the log itself, not from display_lines: the 1,099-character log, one line
        # without double spaces, wraps at spaces into 12 lines of at most 96 characters, folded to 3 + 2.
        log = case['history'][1]['user']
        shown = {name: text.split('[turn 2, user] ')[1].split('\n\n')[0].split('\n')
                 for name, text in (('folded', folded), ('full', full))}
        header, lines = shown['full'][0], [line.removeprefix('    ') for line in shown['full'][1:]]
        self.assertEqual((len(log), len(lines)), (1099, 12))
        self.assertEqual(' '.join(lines), log)
        self.assertLessEqual(max(map(len, lines)), 96)
        self.assertEqual(shown['folded'], [header, *('    ' + line for line in lines[:3]), '    … 7 more lines …',
                                           *('    ' + line for line in lines[-2:])])
        self.assertNotIn('more lines', full)
        self.assertIn('found 1 of 1', folded)

    def test_message_sizes_and_the_fixed_part_add_up_to_the_count_of_the_whole_request(self):
        for name, rule in RULES.items():
            for case_id, case in shipped_cases().items():
                with self.subTest(rule=name, case=case_id):
                    messages = rule(case, counter())['messages']
                    shown = show_case(case, {name: rule}, full=True)
                    sizes = [int(size) for size in SIZE_LINE.findall(shown)]
                    self.assertEqual(len(sizes), len(messages) + 1)  # each message, then <bos> and the prompt
                    self.assertEqual(sum(sizes), whole_count(messages))
                    if OFFICIAL_TEMPLATE is not None:
                        self.assertEqual(sum(sizes), official_count(messages))

    def test_options_of_show_without_show_are_a_usage_error(self):
        for args in (['--strategy', 'notes'], ['--prompt'], ['--full'], ['--show', 'dev-latest', '--format', 'table'],
                     ['--show', 'dev-latest', '--prompt', '--full']):
            with self.subTest(args=args):
                result = evaluate_once(*args)
                self.assertEqual((result.returncode, result.stdout), (2, ''))
                self.assertIn('usage:', result.stderr)


class AgentShowTest(unittest.TestCase):
    """--show of agent requests: each message's share of the whole render, and messages numbered as refusals are."""

    def test_each_agent_message_has_its_share_and_the_shares_add_up_to_the_official_count(self):
        for case in load_cases(HERE / 'agent-cases.json'):
            for name, rule in {**RULES, **agent_rules.RULES}.items():
                with self.subTest(rule=name, case=case['id']):
                    messages = rule(case, counter())['messages']
                    sizes = [int(size) for size in AGENT_SIZE_LINE.findall(show_case(case, {name: rule}, full=True))]
                    self.assertEqual(len(sizes), len(messages) + 1)  # each message, then <bos> and the prompt
                    self.assertEqual(sum(sizes), whole_count(messages))
                    if OFFICIAL_TEMPLATE is not None:
                        self.assertEqual(sum(sizes), official_count(messages))

    def test_a_result_says_whether_the_template_writes_it_in_its_calls_turn_or_drops_it(self):
        case = {case['id']: case for case in load_cases(HERE / 'agent-cases.json')}['dev-agent-parallel']
        relevant = show_case(case, {'relevant': RULES['relevant']}).splitlines()
        trimmed = agent_rules.RULES['trim-last'](case, counter())['messages']
        self.assertIn('[turn 1, tool] 0 tokens · answers call_a · written in the share of its call', relevant)
        self.assertIn('[message 0, tool] 0 tokens · answers call_c · not sent: the template drops it',
                      show_case(case, {'trim-last': agent_rules.RULES['trim-last']}).splitlines())
        if OFFICIAL_TEMPLATE is not None:  # the oracle agrees: that result is nowhere in the prompt
            self.assertNotIn(trimmed[0]['content'], official_render(trimmed))

    def test_a_message_is_numbered_from_0_in_its_label_as_in_the_refusal_that_names_it(self):
        case = {case['id']: case for case in load_cases(HERE / 'agent-cases.json')}['dev-agent-latest']
        request = build_request(case, [])
        request[1:1] = [user('Read it.'), result('call_9', 'stray')]  # a result that answers no call, message 2

        def stray(case, count):
            return {'messages': request, 'turns': [], 'notes': 0, 'input_tokens': count(request)}

        lines = show_case(case, {'stray': stray}).splitlines()
        self.assertIn('[message 2, tool] 0 tokens · answers call_9 · not sent: the template drops it', lines)
        self.assertTrue(lines[-1].endswith('invalid: message 2 (tool) answers no call of the assistant message '
                                           'before it'), lines[-1])

    def test_text_beside_a_call_is_marked_not_sent_and_carries_no_fact_under_llama(self):
        try:
            tokenizer.counter('llama-3.1')
        except CounterError:
            self.skipTest('llama-3.1 is not prepared')
        tokenizer.choose_counter('llama-3.1')
        self.addCleanup(tokenizer.choose_counter, DEFAULT)
        case = {case['id']: case for case in load_cases(HERE / 'agent-cases.json')}['dev-agent-latest']
        newest = case['history'][-1]  # recent keeps it: [user, a call of read_file, its result, an answer]
        case = {**case, 'required': ['Reading it now.'], 'history': [
            *case['history'][:-1], [newest[0], {**newest[1], 'content': 'Reading it now.'}, *newest[2:]]]}
        shown = show_case(case, {'recent': RULES['recent']}).splitlines()
        self.assertIn('[turn 2, assistant] 22 tokens · calls call_2 read_file {"path": ".ci/image"} · its text is '
                      'not sent: llama-3.1 drops it beside a call', shown)
        self.assertNotIn('  + required fact: "Reading it now."', shown)
        self.assertTrue(shown[-1].startswith('found 0 of 1 · missing: "Reading it now."'), shown[-1])


if __name__ == '__main__':
    unittest.main()
