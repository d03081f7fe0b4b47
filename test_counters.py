"""Tests for the counters beside the default (llama-3.1, llama-3.2, llama-3.3, qwen-2.5, phi-3.5): each held to its
official template, --counter on the command line, and what reports record. Each test is named after the failure it
pins.

    .venv/bin/python -m unittest -v test_counters.py   # after .venv/bin/python prepare.py --counter all

The oracle is each counter's official chat template, the archive member its prepared folder keeps (pinned by sha256
and checked when the counter loads), rendered with jinja2 as transformers' apply_chat_template renders it, with the
counter's pinned fixed inputs, and the prompt encoded whole by the tokenizers library: it shares no code with
tokenizer.py's format or sums. A test that needs a counter not prepared skips, naming the command that prepares it.
Property tests run a bounded number of examples, keep no example database, and write nothing to ./.hypothesis.
"""
import copy
import datetime
import hashlib
import json
import os
from pathlib import Path
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from hypothesis import given, settings, strategies as st

import benchmark
import budget_sweep
from case_set import load_cases
from common import LabError, python_command
import evaluate
from prepared_folder import DEFAULT, PREPARED_ENV, TEMPLATE_FILE, counter_folder, read_manifest, served_gguf
from shapes import escape
from strategies import RULES, build_request
from test_support_fixtures import (HERE, MANIFEST, PATHS, awkward_text, conversations, counted, counter_or_skip,
                                   hypothesis_home_outside_the_tree as setUpModule, prepared, rule_requests,
                                   shipped_cases)
from test_support_oracle import OFFICIAL_PATH, official, official_count
from test_support_runs import run_command
import tokenizer
from tokenizer import CounterError, TokenCounter
from views import compare, report_table, turn_map

# The archive's counters; one built from the GGUF it counts (smollm2-135m) is held to it in test_gguf_counter.py
NAMES = [name for name in MANIFEST['counters'] if name != DEFAULT and not served_gguf(MANIFEST, name)]
EXAMPLES = settings(max_examples=40, deadline=None, database=None)
# tokenizer-manifest.json's sha256 before it gave Qwen 2.5's tool-call tags their ids, as every folder prepared
# then records it
MANIFEST_BEFORE_TAGS = '1c05e4d6f73401f985490e7f8a096168cf809f47f3c2eabb8148de20d722aa49'


class CounterTest(unittest.TestCase):
    def setUp(self):
        self.addCleanup(tokenizer.choose_counter, DEFAULT)  # a test that chose another counter leaves the default chosen


class OfficialTemplateTest(CounterTest):
    def test_every_rule_request_renders_and_counts_as_the_official_template(self):
        for name in NAMES:
            with self.subTest(name):
                count = counter_or_skip(self, name)
                requests = rule_requests(count)
                # The 70 distinct requests the four rules count or return on cases.json, each checked below.
                self.assertEqual(len({json.dumps(messages, sort_keys=True) for messages in requests}), 70)
                for messages in requests:
                    self.assertEqual(count.prompt(messages), official(name, messages))
                    self.assertEqual(count(messages), official_count(messages, name))

    @EXAMPLES
    @given(conversations(), st.booleans())
    def test_every_counting_path_gives_the_official_count_on_generated_chats(self, case, system):
        messages = build_request(case, range(len(case['history'])))[0 if system else 1:]  # with and without system
        for name in NAMES:
            count = prepared(name)
            if count is None:
                continue  # the test above names the command
            self.assertEqual(count.prompt(messages), official(name, messages), name)
            expected = official_count(messages, name)
            for path in PATHS:
                self.assertEqual(counted(path, messages, count), expected, (name, path))
            # What every rule decides by: the bare request plus what each turn adds.
            whole = official_count(build_request(case, range(len(case['history']))), name)
            self.assertEqual(count(build_request(case, [])) + sum(count.turn_costs(case['history'])), whole, name)
            count.forget()

    def test_hand_worked_requests(self):
        # Phi-3's <|user|>, <|end|> and <|assistant|> take the whitespace after them (llama.cpp's rule for this vocab),
        # and each text after a special token starts with '\u2581': <|user|> ▁hi <|end|> <|assistant|>.
        # Qwen 2.5 writes its default system message when a request has none; Llama 3 its dated system header.
        table = [('phi-3.5', [{'role': 'user', 'content': 'hi'}], '<|user|>\nhi<|end|>\n<|assistant|>\n', 4),
                 ('qwen-2.5', [{'role': 'user', 'content': 'hi'}], '<|im_start|>system\nYou are Qwen, created by '
                  'Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n'
                  '<|im_start|>assistant\n', 30),
                 ('llama-3.1', [{'role': 'user', 'content': ' hi '}], '<|begin_of_text|><|start_header_id|>system'
                  '<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>'
                  '<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant'
                  '<|end_header_id|>\n\n', 36)]
        for name, messages, prompt, tokens in table:
            with self.subTest(name):
                count = counter_or_skip(self, name)
                self.assertEqual((count.prompt(messages), count(messages)), (prompt, tokens))
                self.assertEqual((official(name, messages), official_count(messages, name)), (prompt, tokens))

    def test_llama_3_counts_the_same_whatever_date_the_template_writes(self):
        # Llama 3.2's template writes today's date where the runtime defines strftime_now; the pin is 26 Jul 2024.
        count = counter_or_skip(self, 'llama-3.2')
        header = count.definition['format']['open']['system']
        pinned = len(count.encode(count.form['open']['system']))
        first = datetime.date(2024, 1, 1)
        days = [first + datetime.timedelta(days) for days in range((datetime.date(2031, 1, 1) - first).days)]
        self.assertEqual(len(days), 2557)
        self.assertEqual({len(count.encode(header.format(date_string=day.strftime('%d %b %Y')))) for day in days},
                         {pinned})

    def test_every_counter_sums_turn_by_turn_and_line_by_line_where_its_tokenizer_allows(self):
        lines = {name: prepared(name) and prepared(name).lines_apart for name in NAMES}
        for name in NAMES:
            with self.subTest(name):
                count = counter_or_skip(self, name)
                self.assertIs(count.fast, True)
                # Phi-3's tokenizer puts '\u2581' before every text it is given, so lines cannot be counted apart.
                self.assertEqual(lines[name], None if name == 'phi-3.5' else tokenizer.LINE_BEFORE_TEXT)

    def test_a_line_of_spaces_is_not_cut_off_where_the_byte_level_split_keeps_it(self):
        # Llama 3's and Qwen 2's split keep '\n \n' in one piece (\s*[\r\n]+), so 'a\n \nb' is 3 tokens; cut after
        # every newline as Gemma's lines are, 4 (a and \n, then ' \n', then b); cut only before a non-space, still 3.
        messages = [{'role': 'user', 'content': 'a\n \nb\nc'}]
        for name in ('llama-3.1', 'qwen-2.5'):
            with self.subTest(name):
                count = counter_or_skip(self, name)
                self.assertEqual(([len(count.encode(part)) for part in tokenizer.LINE_START.split('a\n \nb')],
                                  len(count.encode('a\n \nb'))), ([2, 1, 1], 3))
                self.assertEqual([counted(path, messages, count) for path in PATHS],
                                 [official_count(messages, name)] * len(PATHS))

    def test_every_prepared_tokenizer_reproduces_its_46_llama_cpp_vectors(self):
        separator = f"\n{MANIFEST['pypi_mirror']['vector_separator']}\n"
        for name in NAMES:
            with self.subTest(name):
                count, folder = counter_or_skip(self, name), counter_folder(name)
                inputs = (folder / 'vocab-vectors.inp').read_text(encoding='utf-8').removesuffix(separator)
                outputs = (folder / 'vocab-vectors.out').read_text(encoding='utf-8').splitlines()
                pairs = list(zip(inputs.split(separator), outputs, strict=True))
                self.assertEqual(len(pairs), 46)
                for text, ids in pairs:
                    self.assertEqual(count.encode(text), [int(token) for token in ids.split()], text[:30])


class QwenToolCallTest(CounterTest):
    # Qwen 2.5's tokenizer.json lists <tool_call> and </tool_call> as added tokens 151657 and 151658; its template
    # writes them around each call, and '\n' is the vocab's 'Ċ', id 198.
    CALL = [{'role': 'user', 'content': 'Weather in Paris?'},
            {'role': 'assistant', 'content': '', 'tool_calls': [{'type': 'function', 'function': {
                'name': 'get_weather', 'arguments': {'city': 'Paris'}}}]},
            {'role': 'tool', 'content': '18 C'}, {'role': 'user', 'content': 'And tomorrow?'}]
    # The same request as the counter takes it: the call and its result as the template writes them.
    WRITTEN = [CALL[0], {'role': 'assistant', 'content': '<tool_call>\n{"name": "get_weather", "arguments": '
                                                          '{"city": "Paris"}}\n</tool_call>'},
               {'role': 'user', 'content': '<tool_response>\n18 C\n</tool_response>'}, CALL[3]]

    def test_the_tool_call_tags_are_each_one_token_at_qwen_2_5s_published_ids(self):
        count = counter_or_skip(self, 'qwen-2.5')
        self.assertEqual(count.tokenizer.token_to_id('\u010a'), 198)
        self.assertEqual([count.encode(text) for text in ('<tool_call>', '</tool_call>', '<tool_call>\n',
                                                          '<tool_call></tool_call>')],
                         [[151657], [151658], [151657, 198], [151657, 151658]])

    def test_a_qwen_tool_call_request_counts_as_the_official_template_renders_and_qwen_encodes_it(self):
        count = counter_or_skip(self, 'qwen-2.5')
        self.assertEqual(count.prompt(self.WRITTEN), official('qwen-2.5', self.CALL))
        ids = count.tokenizer.encode(official('qwen-2.5', self.CALL), add_special_tokens=False).ids
        self.assertEqual((ids.count(151657), ids.count(151658)), (1, 1))
        self.assertEqual([counted(path, self.WRITTEN, count) for path in PATHS], [len(ids)] * len(PATHS))


class RefusalTest(CounterTest):
    def test_text_the_model_tokenizer_reads_otherwise_is_refused_not_estimated(self):
        for name, text in (('llama-3.1', 'call <|python_tag|> now'), ('qwen-2.5', 'a <|fim_prefix|> b')):
            with self.subTest(name):
                count = counter_or_skip(self, name)
                marker = next(marker for marker in MANIFEST['counters'][name]['not_counted'] if marker in text)
                for path in PATHS:
                    with self.assertRaises(CounterError) as caught:
                        counted(path, [{'role': 'user', 'content': text}], count)
                    self.assertEqual(str(caught.exception), f"{name} does not count a message holding {marker!r}: "
                                     "the model's own tokenizer reads it otherwise than the vocab of the archive "
                                     f'(tokenizer-manifest.json, counters.{name}.not_counted)')

    def test_a_qwen_counter_prepared_before_it_held_the_tool_call_tags_is_refused_with_the_prepare_advice(self):
        counter_or_skip(self, 'qwen-2.5')
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name) / 'prepared-qwen-2.5'
            shutil.copytree(counter_folder('qwen-2.5'), folder)
            record = json.loads((folder / 'prepared.json').read_text(encoding='utf-8'))
            (folder / 'prepared.json').write_text(json.dumps(record | {'manifest_sha256': MANIFEST_BEFORE_TAGS}),
                                                  encoding='utf-8')
            with self.assertRaises(CounterError) as caught:
                TokenCounter(folder, 'qwen-2.5')
            self.assertEqual(str(caught.exception), f'{folder} is not a valid prepared counter: the manifest changed '
                                                    'since it was prepared; refusing to count: run '
                                                    f"`{python_command()} prepare.py --counter qwen-2.5`")

    def test_an_unknown_counter_lists_the_known_ones_in_one_line_and_exits_2(self):
        for main, script in ((evaluate.main, 'evaluate.py'), (budget_sweep.main, 'budget_sweep.py')):
            with self.subTest(script):
                status, out, err = run_command(main, ['--counter', 'llama-4'], script)
                self.assertEqual((status, out), (2, ''))
                self.assertEqual(err, f"{script}: --counter llama-4: no such counter; the counters are: "
                                      f"{', '.join(MANIFEST['counters'])} (or list)\n")

    def test_counter_list_names_each_counter_its_pins_and_how_to_prepare_it(self):
        status, out, err = run_command(evaluate.main, ['--counter', 'list'], 'evaluate.py')
        self.assertEqual((status, err), (0, ''))
        heads = [line for line in out.splitlines() if not line.startswith('  ')]
        self.assertEqual([line.split(':')[0] for line in heads], list(MANIFEST['counters']))
        for name in NAMES:
            state = (f'prepared in {counter_folder(name)}' if prepared(name)
                     else f'not prepared: run `{python_command()} prepare.py --counter {name}`')
            self.assertIn(f"{name}: {MANIFEST['counters'][name]['publisher_model']}; {state}", heads)
        self.assertIn('  fixed template inputs: {"bos_token": "<|begin_of_text|>", "date_string": "26 Jul 2024"}', out)

    def test_an_unprepared_counter_names_the_command_that_prepares_it_where_this_run_reads_it(self):
        with tempfile.TemporaryDirectory() as name:
            env = {key: value for key, value in os.environ.items() if key != PREPARED_ENV}
            result = subprocess.run([sys.executable, 'evaluate.py', '--counter', 'llama-3.1', '--format', 'table'],
                                    cwd=HERE, env=env | {PREPARED_ENV: str(Path(name) / 'prepared')},
                                    capture_output=True, text=True, timeout=60, check=False)
        folder = Path(name) / 'prepared-llama-3.1'
        self.assertEqual((result.returncode, result.stdout), (2, ''))
        self.assertEqual(result.stderr, f'evaluate.py: the tokenizer is not prepared ({folder}/prepared.json is '
                                        f"missing): run `CONTEXT_LAB_PREPARED={Path(name) / 'prepared'} "
                                        f'{python_command()} prepare.py --counter llama-3.1`\n')

    def test_a_damaged_prepared_counter_is_refused(self):
        manifest = MANIFEST['vocabs']['llama-bpe']
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name)
            files = {'tokenizer.json': b'{}', TEMPLATE_FILE: b'x', 'vocab-vectors.inp': b'x', 'vocab-vectors.out': b'x'}
            for file, data in files.items():
                (folder / file).write_bytes(data)
            record = {'source': 'pypi', 'counter': 'llama-3.1', 'publisher_model': 'meta-llama/Llama-3.1-8B-Instruct',
                      'manifest_sha256': read_manifest()[1], 'vectors_checked': manifest['test_vectors'],
                      'files': {file: {'size': len(data), 'sha256': hashlib.sha256(data).hexdigest()}
                                for file, data in files.items()}}
            (folder / 'prepared.json').write_text(json.dumps(record), encoding='utf-8')
            with self.assertRaises(CounterError) as caught:
                TokenCounter(folder, name='llama-3.1')
        self.assertEqual(str(caught.exception), f"{folder} is not a valid prepared counter: {folder / 'tokenizer.json'}"
                         " does not match the manifest's sha256 (vocabs.llama-bpe.built_tokenizer); refusing to count: "
                         f'run `{python_command()} prepare.py --counter llama-3.1`')


class ReportTest(CounterTest):
    def test_counter_gives_the_chosen_counter_or_the_named_one_each_loaded_once(self):
        counter_or_skip(self, 'llama-3.1')
        self.assertIs(tokenizer.counter(), tokenizer.counter(DEFAULT))
        tokenizer.choose_counter('llama-3.1')
        self.assertEqual((tokenizer.counter().name, tokenizer.counter(DEFAULT).name), ('llama-3.1', DEFAULT))
        self.assertIs(tokenizer.counter(), tokenizer.counter('llama-3.1'))

    def test_a_llama_table_and_turn_map_name_their_counter_and_gemmas_say_nothing(self):
        counter_or_skip(self, 'llama-3.1')
        tokenizer.choose_counter('llama-3.1')
        report = evaluate.report()
        self.assertEqual(report_table(report).splitlines()[-2:], ['', 'Token figures counted by llama-3.1.'])
        self.assertEqual(turn_map(report).splitlines()[1], 'Token figures counted by llama-3.1.')
        recorded = json.loads((HERE / 'evaluation-result.json').read_text(encoding='utf-8'))
        self.assertNotIn('counted by', report_table(recorded) + turn_map(recorded))

    def test_a_report_records_the_counter_and_compare_says_so_first(self):
        counter_or_skip(self, 'llama-3.1')
        tokenizer.choose_counter('llama-3.1')
        report = evaluate.report()
        definition = MANIFEST['counters']['llama-3.1']
        self.assertEqual(report['counter'], {
            'name': 'llama-3.1', 'model': 'meta-llama/Llama-3.1-8B-Instruct',
            'vocab': MANIFEST['vocabs']['llama-bpe']['members']['vocab']['path'],
            'vocab_sha256': MANIFEST['vocabs']['llama-bpe']['members']['vocab']['sha256'],
            'template': definition['template']['path'], 'template_sha256': definition['template']['sha256'],
            'tokenizer_sha256': MANIFEST['vocabs']['llama-bpe']['built_tokenizer']['sha256'],
            'fixed_inputs': {'bos_token': '<|begin_of_text|>', 'date_string': '26 Jul 2024'},
            'count_scope': MANIFEST['chat_format']['count_scope']})
        recorded = json.loads((HERE / 'evaluation-result.json').read_text(encoding='utf-8'))
        lines = compare(recorded, report)
        self.assertEqual(lines[0], 'made with different counters: google/gemma-4-E2B-it -> llama-3.1; token counts '
                                   'and selections differ')
        # Against a copy that differs in one figure, only that figure is named: the counter is not named twice.
        changed = json.loads(json.dumps(report))
        changed['cases']['recent'][0]['input_tokens'] += 1
        self.assertEqual([line for line in compare(report, changed) if 'input_tokens' in line or 'counter' in line],
                         [f"recent dev-latest: input_tokens {report['cases']['recent'][0]['input_tokens']} -> "
                          f"{report['cases']['recent'][0]['input_tokens'] + 1}"])

    def test_show_prompt_prints_the_official_prompt_of_the_chosen_counter(self):
        counter_or_skip(self, 'phi-3.5')
        status, out, err = run_command(evaluate.main, ['--show', 'dev-correction', '--strategy', 'notes', '--prompt',
                                                       '--counter', 'phi-3.5'], 'evaluate.py')
        case = {case['id']: case for case in load_cases(HERE / 'cases.json')}['dev-correction']
        self.assertEqual((status, err, out), (0, '', official('phi-3.5', RULES['notes'](case, prepared(
            'phi-3.5'))['messages'])))

    def test_the_turn_map_and_the_benchmark_count_with_the_chosen_counter(self):
        count = counter_or_skip(self, 'phi-3.5')
        status, out, err = run_command(evaluate.main, ['--format', 'turns', '--counter', 'phi-3.5'], 'evaluate.py')
        self.assertEqual((status, err), (0, ''))
        self.assertIn('dev-correction (dev, corrected decision), 3 turns', out)
        # The benchmark's whole-prompt count and its cached count must select alike under this counter too.
        status, out, _ = run_command(benchmark.main, ['--counter', 'phi-3.5', '--generated', '2', '--turns', '3',
                                                      '--no-sweep'], 'benchmark.py')
        self.assertEqual(status, 0)
        figures = json.loads(out.splitlines()[-1])
        self.assertIs(figures['identical_selections'], True)
        self.assertEqual((figures['agent_seconds'], figures['agent_over_pair']), (None, None))  # no tools in Phi-3.5
        self.assertIs(tokenizer.counter(), count)

    def test_a_sweep_with_another_counter_records_its_name_and_the_default_sweep_the_default_profile(self):
        counter_or_skip(self, 'qwen-2.5')
        with tempfile.TemporaryDirectory() as name:
            output = Path(name) / 'sweep.json'
            status, out, err = run_command(budget_sweep.main, ['--counter', 'qwen-2.5', '--context-limits', '256,384',
                                                               '--output', str(output)], 'budget_sweep.py')
            self.assertEqual((status, out), (0, ''))
            self.assertEqual(json.loads(output.read_text(encoding='utf-8'))['counter']['name'], 'qwen-2.5')
        recorded = json.loads((HERE / 'budget-sweep.json').read_text(encoding='utf-8'))['counter']
        self.assertEqual((recorded['model'], 'name' in recorded), ('google/gemma-4-E2B-it', False))


class SharedCostsTest(unittest.TestCase):
    def test_the_questions_of_one_conversation_have_its_turn_costs_worked_out_once_until_forgotten(self):
        count, history = tokenizer.counter(), [dict(turn) for turn in load_cases(HERE / 'cases.json')[0]['history']]
        with mock.patch.object(count, 'costs_by_text', wraps=count.costs_by_text) as by_text:
            costs = [count.turn_costs(history) for _ in range(3)]
            count.forget()
            costs.append(count.turn_costs(history))
            costs.append(count.turn_costs(list(history)))  # a copy: found by its texts, not taken for the first
        self.assertEqual((by_text.call_count, costs[1:]), (3, [costs[0]] * 4))

    def test_the_bare_count_count_built_keeps_is_that_requests_count_and_is_forgotten_with_the_rest(self):
        # benchmark.py times from forget(): a count kept past it would make the cached count look cheaper.
        count, case = tokenizer.counter(), load_cases(HERE / 'cases.json')[0]
        count.forget()
        self.assertEqual(count.count_built(build_request(case, [0]), case, [0]), count(build_request(case, [0])))
        self.assertEqual(count.heads, {(case['instructions'], case['current']): count(build_request(case, []))})
        count.forget()
        self.assertEqual(count.heads, {})



class NotesHeadTest(unittest.TestCase):
    """notes_head sums a notes request without checking it again: it must count what the official template does,
    and the block `notes` keeps must still be counted whole, so a sum that drifts is refused, not recorded."""

    @unittest.skipIf(OFFICIAL_PATH is None, 'no copy of the official Gemma 4 template to compare with')
    @EXAMPLES
    @given(conversations(), st.lists(awkward_text, max_size=3))
    def test_a_notes_request_summed_unchecked_counts_as_the_official_template(self, case, texts):
        notes = [escape(f'- [turn 1, user] {text}') for text in texts]
        for name in [DEFAULT, *NAMES]:
            if (count := prepared(name)) is not None:
                self.assertEqual(count.notes_head(case, notes), official_count(build_request(case, [], notes), name))

    def test_a_notes_head_one_token_off_is_refused_when_the_kept_block_is_counted_whole(self):
        case = copy.deepcopy(shipped_cases()['dev-correction'])
        real = TokenCounter.notes_head
        with mock.patch.object(TokenCounter, 'notes_head', lambda *args: real(*args) + 1), \
                self.assertRaisesRegex(LabError, 'dev-correction: the request was counted 111 tokens .* and 110 whole'):
            RULES['notes'](case, tokenizer.counter())


if __name__ == '__main__':
    unittest.main()
