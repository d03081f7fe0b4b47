"""Tests for rules files: the plug-in contract of `evaluate.py --rules FILE.py` (rule_files.py).

    .venv/bin/python -m unittest -v test_rule_files.py

Each test is named after the failure it pins. Figures come from the recorded
report or are worked out by hand; rules files are written into temporary folders only.
Every rule runs in a real rules process; the attacks of issues 24 and 33 are made for real
(frames and the garbage collector searched, sys.exit, prints, loops stopped by a short
--rule-timeout, a killed lab, rules that fork, hold the GIL, return megabytes or raise them,
two folders' helpers of one name, look-alike names).
"""
import contextlib
import hashlib
from itertools import chain, combinations
import io
import json
import os
import re
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import answer_check
import benchmark
from benchmark import rule_timing
import budget_sweep
from case_set import load_cases
from runner import CODE_FILES
from scorer import graded_row
import evaluate
from evaluate import report
import rule_files
from rule_files import RuleError, carried_turns, first_copies, load_rule_files, turn_places
from shapes import build_request, turn_key, turn_messages
from test_support_runs import evaluate_py, in_process, lab_main
from tokenizer import count_request, counter
from views import report_table

HERE = Path(__file__).resolve().parent
RECORDED = HERE / 'evaluation-result.json'

# The README's "Write your own rule" file, word for word: the test runs exactly this text.
README = (HERE / 'README.md').read_text(encoding='utf-8')
# The rules file of the README's "Your own rule", exactly as a reader would paste it.
MY_RULES = re.search(r'Save this as `my_rules.py`.*?\n```python\n(.*?)```\n', README, re.S)[1]


def case_named(case_id: str) -> dict:
    return next(case for case in load_cases(HERE / 'cases.json') if case['id'] == case_id)


class RulesFolder(unittest.TestCase):
    """A temporary folder to write rules files into."""

    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)

    def write(self, text: str, name: str = 'rules.py', under: str = '') -> Path:
        path = Path(self.folder.name, under, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding='utf-8')
        return path

    def rule(self, body: str, name: str = 'mine', timeout: float = rule_files.RULE_TIMEOUT):
        """The rule `name` of a file whose rule function has this body, as the lab runs it."""
        path = self.write('from shapes import build_request\n\ndef rule(case, count):\n'
                          + textwrap.indent(textwrap.dedent(body), '    ') + f'\n\nRULES = {{{name!r}: rule}}\n')
        return load_rule_files([path], timeout)[0][name]

    def refusal(self, body: str, case_id: str = 'dev-latest', timeout: float = rule_files.RULE_TIMEOUT) -> str:
        """The message of the RuleError the rule with this body ends in, on that case."""
        with self.assertRaises(RuleError) as raised:
            self.rule(body, timeout=timeout)(case_named(case_id), count_request)
        self.assertNotIn('\n', str(raised.exception))
        return str(raised.exception)


class ContractTest(RulesFolder):
    def test_a_rule_never_sees_the_labels(self):
        selected = self.rule('return [{"role": "user", "content": ",".join(sorted(case))}]')(
            case_named('dev-correction'), count_request)
        self.assertEqual(selected['messages'][0]['content'], 'budget,current,history,id,instructions,kind,split')

    def test_a_rule_that_searches_frames_and_the_garbage_collector_finds_no_labels_to_read_or_change(self):
        # In the lab's own process this rule found the graded case and scored exactly the best possible; writing
        # to its labels changed the best possible row. In the rules process there is no labelled case to find.
        path = self.write(CHEAT, 'cheat.py')
        rules, _ = load_rule_files([path])
        said = rules['cheat'](case_named('dev-correction'), count_request)['messages'][-1]['content']
        self.assertTrue(said.startswith('labelled objects found: 0, objects searched: '), said)
        self.assertGreater(int(said.split(': ')[-1].split('\n')[0]), 1000)  # the search did run
        recorded = json.loads(RECORDED.read_text(encoding='utf-8'))
        result = report(HERE / 'cases.json', [path])
        self.assertEqual([result['summary']['cheat'][split]['facts_found'] for split in ('dev', 'held_out')], [0, 0])
        self.assertEqual(result['best_possible'], recorded['best_possible'])
        for name in ('recent', 'relevant', 'notes', 'hybrid'):
            self.assertEqual(result['cases'][name], recorded['cases'][name])

    def test_a_message_that_reads_short_when_counted_and_long_when_copied_is_counted_as_graded(self):
        # A dict whose content is the whole history when read from a comprehension (the lab's copy) and the
        # question otherwise (the counter): in the lab's own process it was counted at 35 tokens and graded
        # with its fact, "within budget". As JSON it crosses once, and the lab counts the very text it grades.
        rule = self.rule('''
            import sys
            class Shifty(dict):
                def __getitem__(self, key):
                    if key == 'content' and sys._getframe(1).f_code.co_name == '<listcomp>':
                        return ' '.join(turn['user'] + ' ' + turn['assistant'] for turn in case['history'])
                    return dict.__getitem__(self, key)
                def items(self):
                    return [(key, self[key]) for key in self]
            request = build_request(case, [])
            request[-1] = Shifty(request[-1])
            return request''')
        case = case_named('dev-correction')
        selected = rule(case, count_request)
        self.assertEqual(selected['input_tokens'], count_request(selected['messages']))
        row = graded_row(case, selected)
        self.assertEqual((row['required_found'], row['within_budget']), (1, False))  # the whole history is sent

    def test_a_request_changed_after_it_was_counted_is_counted_as_returned(self):
        # The lab reuses its count of a request only when the rule returns that very text.
        rule = self.rule('''
            request = build_request(case, [])
            before = count(request)
            request[-1]['content'] += ' And the history? ' + case['history'][0]['user']
            return {'messages': request, 'input_tokens': before}''')
        selected = rule(case_named('dev-correction'), count_request)
        self.assertEqual(selected['input_tokens'], count_request(selected['messages']))
        self.assertGreater(selected['input_tokens'], count_request(build_request(case_named('dev-correction'), [])))

    def test_a_rule_that_changes_its_history_does_not_change_what_the_next_call_sees(self):
        # The rules process hands the next call the copy the call before got only while it equals the original.
        rule = self.rule('''
            first = case['history'][0]['user']
            case['history'][0]['user'] = 'changed'
            case['history'].append({'user': 'added', 'assistant': 'added'})
            return [{'role': 'user', 'content': first}]''')
        case = case_named('dev-correction')
        self.assertEqual([rule(case, count_request)['messages'][0]['content'] for _ in range(2)],
                         [case['history'][0]['user']] * 2)

    def test_a_request_sent_as_its_turns_is_counted_and_graded_as_its_messages(self):
        # count.count_built sends only the turns and notes; the lab builds the request from its own copy of the case.
        selected = self.rule('''
            request = build_request(case, [1, 0], ['- a note'])
            return {'messages': request, 'size': count.count_built(request, case, [1, 0], ['- a note'])}''')(
            case := case_named('dev-correction'), count_request)
        request = build_request(case, [0, 1], ['- a note'])
        self.assertEqual((selected['messages'], selected['turns']), (request, [0, 1]))
        self.assertEqual(selected['input_tokens'], len(counter().encode(counter().prompt(request))))  # rendered whole

    def test_a_request_of_whole_turns_is_summed_in_the_rules_process_without_asking_the_lab(self):
        # Three pipe exchanges per rule and case (the bare count, the request's, the reply) were a second of a
        # LoCoMo sweep: the lab now sends the bare count and says its counter sums pair requests, so only the reply
        # crosses. A rule that could not ask again still gets the lab's figures, and the lab counts what it returns.
        selected = self.rule('''
            from strategies import fitting
            costs = count.turn_costs(case['history'])  # asked once per conversation
            count.ask = None  # any further question to the lab fails
            return fitting(case, count, [1, 0])''')(case := case_named('dev-correction'), count_request)
        request = build_request(case, [0, 1])
        self.assertEqual((selected['messages'], selected['turns']), (request, [0, 1]))
        self.assertEqual(selected['input_tokens'], len(counter().encode(counter().prompt(request))))  # rendered whole

    def test_a_request_summed_in_the_rules_process_then_changed_is_counted_as_returned(self):
        # What the rules process summed travels as turns only while the rule returns that very request.
        selected = self.rule('''
            request = build_request(case, [0])
            count.count_built(request, case, [0])
            request[1] = {'role': 'user', 'content': 'changed'}
            return request''')(case := case_named('dev-correction'), count_request)
        self.assertEqual(selected['messages'][1]['content'], 'changed')
        self.assertEqual(selected['input_tokens'], count_request(selected['messages']))

    def test_turns_a_rules_process_reports_it_summed_are_checked_by_the_lab(self):
        # The reply's turns come from a process that runs user code: the lab checks them as a count's.
        self.assertEqual(self.refusal('''
            count.count_built(build_request(case, [0]), case, [0])
            count.built = {'kept': [0, 0], 'notes': []}, build_request(case, [0, 0])
            return build_request(case, [0, 0])''', 'dev-correction').split(': ', 1)[1],
            'rule mine: case dev-correction: returned turns the counter does not accept: count: expected {"kept": '
            'distinct turn indices below 3, "notes": texts}')

    def test_a_request_built_of_a_case_the_rule_changed_is_counted_and_graded_as_the_rule_built_it(self):
        # Only a request of the case as the lab sent it travels as its turns: the lab would build another.
        selected = self.rule('''
            from strategies import fitting
            return fitting(dict(case, current='Answer briefly. ' + case['current']), count, [0, 1])''')(
            case := case_named('dev-correction'), count_request)
        self.assertEqual(selected['messages'][-1]['content'], 'Answer briefly. ' + case['current'])
        self.assertEqual(selected['input_tokens'], len(counter().encode(counter().prompt(selected['messages']))))

    def test_turns_sent_as_other_than_distinct_indices_of_the_history_are_refused_naming_rule_and_case(self):
        for kept, notes in (([0, 0], []), ([9], []), ([True], []), (['0'], []), ([0], [1])):
            with self.subTest(kept=kept, notes=notes):
                body = f'import json\nreturn count.ask("count", json.dumps({{"kept": {kept!r}, "notes": {notes!r}}}))'
                self.assertEqual(self.refusal(body.replace("'", '"'), 'dev-correction').split(': ', 1)[1],
                                 'rule mine: case dev-correction: the rule raised CounterError: count: expected '
                                 '{"kept": distinct turn indices below 3, "notes": texts} (line 5 of rules.py)')

    def test_one_rules_process_serves_every_rule_and_case_and_it_is_not_the_lab(self):
        path = self.write('import os\nRULES = {name: lambda case, count: [{"role": "user", "content": str(os.getpid())}]'
                          ' for name in ("one", "two")}\n')
        rules, _ = load_rule_files([path])
        pids = {rule(case, count_request)['messages'][0]['content'] for rule in rules.values()
                for case in load_cases(HERE / 'cases.json')}
        self.assertEqual(len(pids), 1)
        self.assertNotEqual(pids, {str(os.getpid())})

    def test_a_rules_file_imports_a_helper_module_beside_it_and_writes_no_bytecode(self):
        self.write('PREFIX = "from the helper: "\n', 'my_helper.py')
        path = self.write('import my_helper\nRULES = {"helped": lambda case, count: '
                          '[{"role": "user", "content": my_helper.PREFIX + case["current"]}]}\n')
        selected = load_rule_files([path])[0]['helped'](case_named('dev-latest'), count_request)
        self.assertEqual(selected['messages'][0]['content'], 'from the helper: ' + case_named('dev-latest')['current'])
        self.assertEqual(sorted(p.name for p in path.parent.iterdir()), ['my_helper.py', 'rules.py'])

    def test_a_plain_list_of_messages_is_a_request(self):
        selected = self.rule('return build_request(case, [0, 1])')(case_named('dev-correction'), count_request)
        row = graded_row(case_named('dev-correction'), selected)
        self.assertEqual((row['turns'], row['required_found'], row['stale_included']), ([0, 1], 1, ['We will use MySQL']))

    def test_a_request_over_the_allowance_is_graded_and_marked_not_refused(self):
        # dev-old-decision's history holds a turn larger than the whole 256-token allowance.
        case = case_named('dev-old-decision')
        row = graded_row(case, self.rule('return build_request(case, [0, 1, 2])')(case, count_request))
        self.assertEqual((row['turns'], row['within_budget'], row['required_found']), ([0, 1, 2], False, 1))
        self.assertGreater(row['input_tokens'], 256)


CHEAT = '''\
import gc
import sys


def cheat(case, count):
    """Look for the labelled case in every frame up the stack and in every object alive; copy its facts, change them."""
    facts, labelled = [], []
    frame = sys._getframe(1)
    while frame is not None:
        labelled += [value for value in list(frame.f_locals.values()) if isinstance(value, dict) and 'required' in value]
        frame = frame.f_back
    searched = gc.get_objects()
    labelled += [value for value in searched if isinstance(value, dict) and 'required' in value]
    for found in labelled:
        facts += found['required']
        found['required'].append('a fact no message states')
        found['stale'].extend(found['required'])
    return [{'role': 'system', 'content': case['instructions']},
            {'role': 'user', 'content': '\\n'.join([f'labelled objects found: {len(labelled)}, objects searched: '
                                                   f'{len(searched)}', *facts, case['current']])}]


RULES = {'cheat': cheat}
'''


class TurnDetectionTest(unittest.TestCase):
    HISTORY = [{'user': 'a', 'assistant': 'b'}, {'user': 'c', 'assistant': 'd'}, {'user': 'a', 'assistant': 'b'}]

    @staticmethod
    def messages(*pairs) -> list[dict]:
        return [{'role': role, 'content': content} for role, content in pairs]

    def test_a_turn_counts_only_as_its_user_then_assistant_message_side_by_side(self):
        split = self.messages(('system', 's'), ('user', 'c'), ('user', 'q'), ('assistant', 'd'), ('user', 'q'))
        swapped = self.messages(('assistant', 'd'), ('user', 'c'), ('user', 'q'))
        lone = self.messages(('user', 'c'), ('user', 'q'))
        reworded = self.messages(('user', 'c '), ('assistant', 'd'), ('user', 'q'))
        for messages in (split, swapped, lone, reworded):
            self.assertEqual(carried_turns(messages, turn_places(self.HISTORY)), [])

    def test_a_repeated_turn_takes_the_earliest_free_copy_and_a_turn_sent_twice_counts_once(self):
        once = self.messages(('user', 'a'), ('assistant', 'b'), ('user', 'q'))
        twice = self.messages(('user', 'a'), ('assistant', 'b'), ('user', 'a'), ('assistant', 'b'), ('user', 'q'))
        thrice = [*twice[:2], *twice]
        cd_twice = self.messages(('user', 'c'), ('assistant', 'd'), ('user', 'c'), ('assistant', 'd'))
        self.assertEqual(carried_turns(once, turn_places(self.HISTORY)), [0])
        self.assertEqual(carried_turns(twice, turn_places(self.HISTORY)), [0, 2])
        self.assertEqual(carried_turns(thrice, turn_places(self.HISTORY)), [0, 2])
        self.assertEqual(carried_turns(cd_twice, turn_places(self.HISTORY)), [1])

    def test_a_request_built_of_kept_turns_carries_the_turns_carried_turns_finds_in_it(self):
        history = [*self.HISTORY, self.HISTORY[1], {'user': 'e', 'assistant': 'f'}]  # turns 0 and 2, 1 and 3 alike
        places = turn_places(history)
        copies = [places[turn_key(turn_messages(turn))] for turn in history]
        for kept in chain.from_iterable(combinations(range(len(history)), size) for size in range(len(history) + 1)):
            with self.subTest(kept=kept):
                request = build_request({'instructions': 's', 'current': 'q', 'history': history}, kept)
                self.assertEqual(first_copies(list(kept), copies), carried_turns(request, places))

    def test_turns_are_found_in_any_order_the_rule_sends_them(self):
        newest_first = self.messages(('user', 'c'), ('assistant', 'd'), ('user', 'a'), ('assistant', 'b'))
        self.assertEqual(carried_turns(newest_first, turn_places(self.HISTORY[:2])), [0, 1])


class RefusalTest(RulesFolder):
    """Every refusal through the real command: exit 2, nothing on stdout, one line naming file, rule and case."""

    def refused(self, *paths: Path, extra: tuple = ()) -> str:
        result = in_process(evaluate, *[arg for path in paths for arg in ('--rules', str(path))], *extra)
        self.assertEqual((result.returncode, result.stdout), (2, ''), result.stderr)
        self.assertNotIn('Traceback', result.stderr)
        self.assertEqual(result.stderr.count('\n'), 1, result.stderr)
        return result.stderr

    def test_a_file_that_cannot_be_imported_is_one_line(self):
        path = self.write('x = 1\ndef rule(case, count)\n    return []\n')
        self.assertEqual(self.refused(path), f'evaluate.py: {path}: cannot import it: SyntaxError: expected \':\' '
                                             f'(rules.py, line 2) (line 2 of rules.py)\n')
        missing = Path(self.folder.name, 'absent.py')
        self.assertEqual(self.refused(missing), f'evaluate.py: {missing}: no such rules file\n')
        # Not .py: importlib finds no loader for it, and the refusal read "'NoneType' object has no attribute 'loader'".
        text = self.write('RULES = {}\n', 'rules.txt')
        self.assertEqual(self.refused(text), f'evaluate.py: {text}: a rules file is Python source, its name ending '
                                             'in .py\n')
        raising = self.write('import json\n\nVALUE = json.loads("{")\n', 'raising.py')
        self.assertRegex(self.refused(raising), r'cannot import it: JSONDecodeError: .* \(line 3 of raising\.py\)\n$')

    def test_a_file_without_a_rules_dict_is_one_line(self):
        for text, found in (('X = 1\n', 'none'), ('RULES = [len]\n', 'list')):
            path = self.write(text)
            self.assertEqual(self.refused(path), f'evaluate.py: {path}: expected RULES, a dict of name -> '
                                                 f'function(case, count); found {found}\n')

    def test_a_name_taken_by_a_built_in_the_best_possible_or_another_file_is_one_line(self):
        for name in ('recent', 'best possible', 'best possible (reads the labels)'):
            path = self.write(f'RULES = {{{name!r}: len}}\n')
            self.assertIn(f"{path}: rule {name!r}: a rule name must be printable ASCII without \"|\", single-spaced, "
                          "and none of the lab's", self.refused(path))
        # Two files may share a basename; two rules may not share a name.
        first = self.write('RULES = {"mine": len}\n', under='one')
        second = self.write('RULES = {"mine": len}\n', under='two')
        self.assertEqual(self.refused(first, second),
                         f'evaluate.py: {second}: rule mine: the name is taken by a rule of {first}\n')

    def test_a_return_value_the_counter_refuses_is_one_line_naming_file_rule_and_case(self):
        path = self.write('RULES = {"robot": lambda case, count: [{"role": "robot", "content": "hi"}], '
                          '"nothing": lambda case, count: None}\n')
        self.assertEqual(self.refused(path),
                         f"evaluate.py: {path}: rule robot: case dev-latest: returned a request the counter does not "
                         f"accept: message 0: unknown role 'robot'; expected one of ['assistant', 'system', 'user']\n")
        path = self.write('RULES = {"nothing": lambda case, count: None}\n')
        self.assertEqual(self.refused(path), f"evaluate.py: {path}: rule nothing: case dev-latest: returned NoneType; "
                                             "expected a list of chat messages or a dict with 'messages'\n")

    def test_an_exception_in_a_rule_gives_the_last_line_of_the_rules_file_it_passed(self):
        path = self.write('''\
            from shapes import allowance


            def helper(case):
                return allowance({'budget': {}})


            def rule(case, count):
                if case['id'] == 'dev-pronoun':
                    return helper(case)
                return [{'role': 'user', 'content': case['current']}]


            RULES = {'mine': rule}
            ''')
        # The KeyError is raised inside common.py; the last line of the rules file on the way is line 5.
        self.assertEqual(self.refused(path), f"evaluate.py: {path}: rule mine: case dev-pronoun: the rule raised "
                                             f"KeyError: 'context_limit' (line 5 of rules.py)\n")

    def test_sys_exit_at_import_or_in_a_rule_is_exit_2_not_a_silent_no_change(self):
        # Under --compare exit 0 means "no change": a rule's exit must not be taken for one.
        at_import = self.write('import sys\nsys.exit(0)\n', 'at_import.py')
        self.assertEqual(lab_main(evaluate, '--rules', str(at_import), '--compare', str(RECORDED)),
                         (2, '', f'evaluate.py: {at_import}: cannot import it: SystemExit: 0 (line 2 of at_import.py)\n'))
        in_rule = self.write('import sys\nRULES = {"quits": lambda case, count: sys.exit(0)}\n', 'in_rule.py')
        self.assertEqual(lab_main(evaluate, '--rules', str(in_rule), '--compare', str(RECORDED)),
                         (2, '', f'evaluate.py: {in_rule}: rule quits: case dev-latest: the rule raised SystemExit: 0 '
                             '(line 2 of in_rule.py)\n'))

    def test_a_looping_rule_or_import_is_stopped_by_the_rule_timeout_in_every_script_that_runs_rules(self):
        looping = self.write('def rule(case, count):\n    while True:\n        pass\nRULES = {"loops": rule}\n')
        at_import = self.write('while True:\n    pass\n', 'at_import.py')
        limit = ' (--rule-timeout SECONDS sets the limit per case)'
        for script, extra in ((evaluate, ()), (evaluate, ('--show', 'dev-latest')),
                              (budget_sweep, ('--context-limits', '256')), (benchmark, ('--cases', 'cases.json'))):
            with self.subTest(script=script.__name__, extra=extra):
                started = time.monotonic()
                status, out, err = lab_main(script, '--rules', str(looping), '--rule-timeout', '0.3', *extra)
                self.assertLess(time.monotonic() - started, 30)
                self.assertEqual((status, out), (2, ''))
                self.assertEqual(err.splitlines()[-1],  # after the script's own progress lines
                                 f'{script.__name__}.py: {looping}: rule loops: case dev-latest: still running after '
                                 f'0.3 s{limit}')
                status, out, err = lab_main(script, '--rules', str(at_import), '--rule-timeout', '0.3', *extra)
                self.assertEqual((status, err), (2, f'{script.__name__}.py: {at_import}: still running after 0.3 s'
                                                    f'{limit}\n'))
        # answer_check imports the rules files before it grades or records, and names the option it has.
        self.assertEqual(lab_main(answer_check, '--rules', str(at_import), '--rule-timeout', '0.3'),
                         (2, '', f'answer_check.py: {at_import}: still running after 0.3 s{limit}\n'))

    def test_a_rule_timeout_that_is_not_a_positive_number_is_refused_by_the_option(self):
        for value in ('0', '-1', 'nan', 'inf', 'soon', '86401', '1e308'):  # 1e308 was an OverflowError in select
            result = in_process(evaluate, '--rule-timeout', value)
            self.assertEqual(result.returncode, 2)
            self.assertTrue(result.stderr.endswith(f"error: argument --rule-timeout: invalid seconds value: "
                                                   f"'{value}'\n"), result.stderr)

    def test_an_unknown_strategy_for_show_is_one_line_listing_the_rules(self):
        path = self.write(MY_RULES)
        self.assertEqual(self.refused(path, extra=('--show', 'dev-latest', '--strategy', 'nope')),
                         'evaluate.py: --strategy nope: no such rule; the rules are: recent, relevant, notes, hybrid, '
                         'question_words_first\n')


class AnythingGoesWrongTest(RulesFolder):
    """Whatever a rule raises or returns is one RuleError naming file, rule and case (a real rules process)."""

    def test_an_exception_of_any_kind_is_one_line(self):
        self.assertEqual(self.refusal('class Custom(BaseException):\n    pass\nraise Custom("mine")')
                         .split(': ', 1)[1], 'rule mine: case dev-latest: the rule raised Custom: mine (line 6 of rules.py)')
        self.assertTrue(self.refusal('raise KeyboardInterrupt').endswith('the rule raised KeyboardInterrupt '
                                                                          '(line 4 of rules.py)'))
        unreadable = 'class Unreadable(Exception):\n    def __str__(self):\n        raise SystemExit(3)\nraise Unreadable()'
        self.assertTrue(self.refusal(unreadable).endswith('the rule raised an exception that cannot be shown'))

    def test_a_request_far_larger_than_its_case_is_refused_before_it_is_counted(self):
        # A 50 MB request took 157 s and 4.2 GB to count. A 3.3 MB one, returned or sent to count, is refused unread.
        for body in ('return [{"role": "user", "content": "many words " * 300_000}]',
                     'count([{"role": "user", "content": "many words " * 300_000}])'):
            started = time.monotonic()
            self.assertRegex(self.refusal(body), r'^\S+: rule mine: case dev-latest: sent over [\d,]+ bytes at once; a '
                                                 r'rule may send at most twice the case it was given, plus 1 MiB$')
            self.assertLess(time.monotonic() - started, 5)

    def test_a_rule_raising_a_ten_megabyte_message_is_one_short_line_that_says_it_was_cut(self):
        message = self.refusal('raise ValueError("x" * 10_000_000)')
        self.assertRegex(message, r': the rule raised ValueError: x{370}… \(9,999,630 more characters\) '
                                  r'\(line 4 of rules\.py\)$')
        # A reply the rule forges itself, through the rules process's own pipe, is cut by the lab.
        forged = self.refusal('''
            import gc, json, rule_files
            pipe = next(found for found in gc.get_objects() if isinstance(found, rule_files.RemoteCount))
            pipe.send(json.dumps({'error': 'y' * 500_000}))
            return build_request(case, [])''')
        self.assertRegex(forged, r'^\S+: rule mine: case dev-latest: y{770}… \(499,230 more characters\)$')

    def test_rules_whose_items_raise_is_one_line_naming_the_file(self):
        path = self.write('class Rules(dict):\n    def items(self):\n        raise RuntimeError("no items")\n'
                          'RULES = Rules(mine=len)\n')
        with self.assertRaisesRegex(RuleError, f'^{re.escape(str(path))}: cannot read its RULES: RuntimeError: no '
                                               r'items \(line 3 of rules\.py\)$'):
            load_rule_files([path])

    def test_a_lone_surrogate_in_a_request_or_a_count_is_refused_not_a_traceback(self):
        # JSON carries "\ud800" escaped; as a request's text it ended the run in a traceback (exit 1).
        for body in ('return [{"role": "user", "content": "a\\ud800"}]',
                     'count([{"role": "user", "content": "a\\ud800"}])'):
            self.assertEqual(self.refusal(body).split(': ', 1)[1], 'rule mine: case dev-latest: sent a lone surrogate '
                                                                  '(half a UTF-16 pair), which is not text')
        # A pair is one character, and text.
        selected = self.rule('return [{"role": "user", "content": "a\\U0001F600"}]')(case_named('dev-latest'),
                                                                                    count_request)
        self.assertEqual(selected['messages'], [{'role': 'user', 'content': 'a\U0001F600'}])

    def test_a_request_nested_past_what_the_counter_renders_is_refused_not_a_recursion_error_in_the_lab(self):
        # 330 levels of call arguments went through JSON and ended the lab's own process in a RecursionError.
        body = ('args = {}\nfor _ in range(330):\n    args = {"a": args}\n'
                'call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": args}}\n'
                'return [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, '
                '{"role": "assistant", "content": "", "tool_calls": [call]}, '
                '{"role": "tool", "tool_call_id": "c", "content": "r"}, {"role": "user", "content": "q"}]')
        self.assertEqual(self.refusal(body).split(': ', 1)[1], 'rule mine: case dev-latest: returned a request the '
                         'counter does not accept: message 2: nests lists and objects more than 100 levels deep '
                         '(tool_formats.MOST_NESTING), which the lab does not render')

    def test_a_return_value_json_cannot_carry_is_one_line(self):
        self.assertTrue(self.refusal('return [{"role": "user", "content": {1, 2}}]').endswith(
            "returned what JSON cannot carry: TypeError: Object of type set is not JSON serializable"))

    def test_turn_costs_of_pairs_and_agent_turns_mixed_is_one_line_not_a_traceback(self):
        # The counter checks an agent history's messages; a pair before one once reached the pair counter, which raised.
        said = self.refusal('count.turn_costs([case["history"][0], [{"role": "user", "content": "a"}]])\nreturn []')
        self.assertIn('turn_costs: expected a list of turns, all {"user": text, "assistant": text} or all lists of '
                      'messages', said)

    def test_a_rule_that_ends_its_process_is_one_line_with_the_exit_status(self):
        self.assertTrue(self.refusal('import os\nos._exit(7)').endswith(
            'rule mine: case dev-latest: the rules process ended (exit status 7) without answering'))

    def test_a_looping_rule_is_stopped_and_its_process_ended(self):
        started = time.monotonic()
        rule = self.rule('while True:\n    pass', timeout=0.3)
        with self.assertRaisesRegex(RuleError, r': rule mine: case dev-latest: still running after 0\.3 s '):
            rule(case_named('dev-latest'), count_request)
        self.assertLess(time.monotonic() - started, 30)
        self.assertEqual([child.process.returncode for child in rule_files.CHILDREN
                          if child.timeout == 0.3], [-signal.SIGKILL])

    def test_names_that_could_pass_for_another_row_or_forge_one_are_refused(self):
        # A Cyrillic e in 'r\u0435cent' or 'lab\u0435ls' read as the lab's row; so would a capital I for an l.
        for name in ('recent ', 'best  possible', 'a\nb', 'x | y', '\u202egnp', '', 'Recent',
                     'best possible (READS the labels)', 'r\u0435cent', 'best possible (reads the lab\u0435ls)',
                     'best possible (reads the Iabels)', 'n0tes', 'caf\u00e9'):
            path = self.write(f'RULES = {{{name!r}: len}}\n')
            with self.subTest(name=name), self.assertRaises(RuleError) as raised:
                load_rule_files([path])
            self.assertEqual(str(raised.exception), f'{path}: rule {name!r}: a rule name must be printable ASCII '
                                                    'without "|", single-spaced, and none of the lab\'s in any case, '
                                                    'or with 1 or I for l, 0 for o (recent, relevant, notes, hybrid, '
                                                    'best possible)')
        one, two = self.write('RULES = {"Mine1": len}\n', under='one'), self.write('RULES = {"minel": len}\n', under='two')
        with self.assertRaisesRegex(RuleError, f'rule minel: the name is taken by a rule of {re.escape(str(one))}$'):
            load_rule_files([one, two])


class ProcessTest(RulesFolder):
    def test_prints_go_to_stderr_labelled_and_the_report_stays_valid_json(self):
        path = self.write('''\
            import os, sys
            print('loaded')
            def rule(case, count):
                print('asked', case['id'])
                print('to stderr', file=sys.stderr)
                os.write(1, b'straight to fd 1\\n')
                return [{'role': 'user', 'content': case['current']}]
            RULES = {'talks': rule}
            ''', 'talks.py')
        result = evaluate_py('--rules', str(path))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout)['summary']['talks']['dev']['cases'], 6)
        lines = result.stderr.splitlines()
        self.assertEqual(lines[:5], [f'{path}: loaded', f'{path}: rule talks: asked dev-latest',
                                     f'{path}: rule talks: to stderr', 'straight to fd 1',
                                     f'{path}: rule talks: asked dev-old-decision'])
        self.assertEqual(len(lines), 1 + 12 * 3)

    def forking_rule(self, hold: str) -> tuple[Path, Path]:
        """A rules file whose rule forks a process that sleeps 15 s, holding the rules process's pipes, writes
        that process's id to the file `forked` and then runs `hold`; (the rules file, `forked`)."""
        forked = Path(self.folder.name, 'forked')
        path = self.write(f'''\
            import os, re, time
            def rule(case, count):
                pid = os.fork()
                if pid == 0:
                    time.sleep(15)
                    os._exit(0)
                with open({str(forked)!r} + '.part', 'w') as out:
                    out.write(str(pid))
                os.rename({str(forked)!r} + '.part', {str(forked)!r})
                {hold}
            RULES = {{'forks': rule}}
            ''')
        return path, forked

    def started_lab(self, path: Path, forked: Path, **pipes) -> tuple[subprocess.Popen, int]:
        """`evaluate.py --rules path` running, once its rule has forked: (the lab, the forked process's id)."""
        lab = subprocess.Popen([sys.executable, 'evaluate.py', '--rules', str(path)], cwd=HERE,
                               stdout=subprocess.DEVNULL, **pipes)
        self.addCleanup(lambda: (lab.poll() is None and lab.kill(), lab.communicate()))
        deadline = time.monotonic() + 120
        while not forked.exists() and time.monotonic() < deadline and lab.poll() is None:
            time.sleep(0.05)
        self.addCleanup(end_if_alive, pid := int(forked.read_text()))
        return lab, pid

    def test_a_rule_that_forks_is_stopped_at_the_timeout_with_the_process_it_forked(self):
        # communicate() waited for every holder of the rules process's pipes: here 15 s past a 0.5 s limit, and
        # the forked process lived on.
        path, forked = self.forking_rule('while True:\n                    pass')
        rule = load_rule_files([path], 0.5)[0]['forks']
        started = time.monotonic()
        with self.assertRaisesRegex(RuleError, r'rule forks: case dev-latest: still running after 0\.5 s '):
            rule(case_named('dev-latest'), count_request)
        self.assertLess(time.monotonic() - started, 5)
        self.addCleanup(end_if_alive, pid := int(forked.read_text()))
        self.assertTrue(gone(pid, 5))

    def test_a_sigterm_ends_the_lab_at_once_without_a_traceback_and_with_the_process_its_rule_forked(self):
        # It hung in communicate() until the forked process ended; a second signal there printed a traceback.
        lab, pid = self.started_lab(*self.forking_rule('while True:\n                    pass'), stderr=subprocess.PIPE)
        os.kill(lab.pid, signal.SIGTERM)
        _, err = lab.communicate(timeout=5)  # the forked process holds the lab's stderr while it lives
        self.assertEqual((lab.returncode, err), (130, b'evaluate.py: interrupted; nothing was written\n'))
        self.assertTrue(gone(pid, 5))

    def test_a_killed_lab_takes_its_rules_process_and_what_a_rule_forked_with_it_even_while_the_rule_holds_the_gil(self):
        # A catastrophic regex holds the GIL: a thread of the rules process that watched for the lab's end never ran.
        lab, pid = self.started_lab(*self.forking_rule("re.match(r'(a+)+$', 'a' * 40 + '!')"),
                                    stderr=subprocess.DEVNULL)
        children = Path(f'/proc/{lab.pid}/task/{lab.pid}/children').read_text().split()
        self.assertEqual(len(children), 1)
        self.addCleanup(end_if_alive, int(children[0]))
        os.kill(lab.pid, signal.SIGKILL)
        self.assertTrue(gone(int(children[0]), 5))
        self.assertTrue(gone(pid, 5))

    def test_benchmark_times_a_rules_files_rule_with_its_own_process_cpu(self):
        path = self.write('''\
            import time
            def rule(case, count):
                start = time.process_time()
                while time.process_time() - start < 0.02:
                    pass
                return [{'role': 'user', 'content': case['current']}]
            RULES = {'burns': rule}
            ''')
        with contextlib.redirect_stderr(io.StringIO()):
            table = rule_timing(HERE / 'cases.json', [path], 10)
        row = next(line for line in table.splitlines() if '| burns |' in line)
        for seconds in row.strip('| ').split(' | ')[1:]:
            self.assertGreaterEqual(float(seconds), 12 * 0.02)

    def test_a_users_rules_file_in_the_lab_folder_is_not_taken_for_a_lab_script(self):
        # The README says to save my_rules.py in the lab's folder; test_cli must not run it as one of its scripts.
        lab = Path(self.folder.name, 'lab')
        lab.mkdir()
        tracked = subprocess.run(['git', 'ls-files', '-z', '*.py', 'requirements.txt'], cwd=HERE, capture_output=True, check=True,
                                 timeout=60).stdout.decode().split('\0')
        for name in filter(None, tracked):
            shutil.copy2(HERE / name, lab / name)
        for command in (['git', 'init', '-q'], ['git', 'add', '.']):
            subprocess.run(command, cwd=lab, check=True, timeout=60, capture_output=True)
        (lab / 'my_rules.py').write_text(MY_RULES + "\nif __name__ == '__main__':\n    print('run me')\n",
                                         encoding='utf-8')
        found = subprocess.run([sys.executable, '-c', 'import test_cli; print(test_cli.SCRIPTS)'], cwd=lab,
                               capture_output=True, text=True, timeout=120, check=True).stdout
        self.assertIn("'evaluate.py'", found)
        self.assertNotIn('my_rules.py', found)


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie waiting for its parent's wait does not)."""
    try:
        return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


def gone(pid: int, within: float) -> bool:
    """Whether the process has ended within that many seconds."""
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def end_if_alive(pid: int) -> None:
    """A test's cleanup: a process it made that failed to end is ended, not left to burn the CPU."""
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


class ReportTest(RulesFolder):
    def test_a_rules_file_whose_name_is_not_utf8_is_recorded_under_its_escaped_name(self):
        # A Linux file name may hold any byte; the report is JSON text, and stdout strict UTF-8 as on a desktop.
        folder = Path(self.write('RULES = {}\n')).parent
        os.rename(folder / 'rules.py', os.fsdecode(os.fsencode(folder) + b'/rules\xff.py'))
        result = subprocess.run([sys.executable, 'evaluate.py', '--rules', os.fsencode(folder) + b'/rules\xff.py'],
                                cwd=HERE, capture_output=True, timeout=300,
                                env={**os.environ, 'PYTHONIOENCODING': 'utf-8:strict'})
        self.assertEqual((result.returncode, result.stderr), (0, b''))
        self.assertEqual(json.loads(result.stdout)['rule_files'][0]['file'], 'rules\\xff.py')

    def test_without_rules_the_report_has_no_rules_key_and_with_them_the_four_rows_are_the_recorded_ones(self):
        recorded = json.loads(RECORDED.read_text(encoding='utf-8'))
        self.assertNotIn('rule_files', recorded)
        self.assertEqual(list(recorded['code_sha256']), list(CODE_FILES))
        path = self.write(MY_RULES, 'my_rules.py')
        result = report(HERE / 'cases.json', [path])
        self.assertEqual(list(result['cases']), ['recent', 'relevant', 'notes', 'hybrid', 'question_words_first'])
        for name in ('recent', 'relevant', 'notes', 'hybrid'):
            self.assertEqual(result['cases'][name], recorded['cases'][name])
            self.assertEqual(result['summary'][name], recorded['summary'][name])
        self.assertEqual(result['best_possible'], recorded['best_possible'])
        self.assertEqual(result['rule_files'], [{'file': 'my_rules.py',
                                                 'sha256': hashlib.sha256(MY_RULES.encode()).hexdigest()}])
        self.assertEqual(list(result['code_sha256']), [*CODE_FILES, 'rule_files.py'])

    def test_over_budget_requests_are_counted_in_the_summary_and_said_under_the_table(self):
        path = self.write('from shapes import build_request\n'
                          'RULES = {"all": lambda case, count: build_request(case, range(len(case["history"])))}\n')
        result = report(HERE / 'cases.json', [path])
        # Every conversation holds a turn larger than the whole 256-token allowance (the README's case set).
        self.assertEqual([result['summary']['all'][split]['over_budget'] for split in ('dev', 'held_out')], [6, 6])
        self.assertTrue(report_table(result).endswith(
            '\nRequests over the input allowance (graded all the same): all dev: 6 of 6; all held-out: 6 of 6.\n'))
        self.assertNotIn('over the input allowance', report_table(json.loads(RECORDED.read_text(encoding='utf-8'))))

    def test_importing_a_rules_file_writes_no_bytecode_beside_it(self):
        path = self.write(MY_RULES, 'my_rules.py')
        load_rule_files([path])
        self.assertEqual(sorted(p.name for p in path.parent.iterdir()), ['my_rules.py'])

    def test_two_rules_files_with_a_helper_of_one_name_each_import_their_own(self):
        # The second file's `import helper` found the first's in sys.modules: 7 of 7 facts one way, 0 of 7 the other.
        at_import = 'import helper\nRULES = {NAME: lambda case, count: [{"role": "user", "content": helper.WHO}]}\n'
        in_rule = ('def rule(case, count):\n    import helper\n    return [{"role": "user", "content": helper.WHO}]\n'
                   'RULES = {NAME: rule, NAME + " too": rule}\n')  # two rules of one folder, one after the other
        for folder in ('a', 'b'):
            self.write(f'WHO = {folder!r}\n', 'helper.py', under=folder)
        for first, second in ((at_import, at_import), (in_rule, at_import), (in_rule, in_rule)):
            a = self.write(first.replace('NAME', '"from a"'), under='a')
            b = self.write(second.replace('NAME', '"from b"'), under='b')
            for paths in ([a, b], [b, a]):
                rules = load_rule_files(paths)[0]
                with self.subTest(first=first, second=second, order=paths):
                    self.assertEqual({name: rule(case_named('dev-latest'), count_request)['messages'][0]['content']
                                      for name, rule in rules.items()}, {name: name[5] for name in rules})
                    self.assertEqual(len(rules), (first, second).count(in_rule) + 2)

    def test_two_files_with_one_basename_are_two_modules(self):
        one = self.write('RULES = {"first": lambda case, count: [{"role": "user", "content": "1"}]}\n', under='a')
        two = self.write('RULES = {"second": lambda case, count: [{"role": "user", "content": "2"}]}\n', under='b')
        rules, files = load_rule_files([one, two])
        case = case_named('dev-latest')
        self.assertEqual([rules[name](case, count_request)['messages'][0]['content'] for name in rules], ['1', '2'])
        self.assertEqual([entry['file'] for entry in files], ['rules.py', 'rules.py'])


class CommandTest(RulesFolder):
    def test_the_readme_rules_file_runs_as_the_readme_says(self):
        path = self.write(MY_RULES, 'my_rules.py')
        result = in_process(evaluate, '--rules', str(path), '--format', 'table')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        # Worked out from the turn maps: it keeps every turn that fits, question-word turns first, so it finds
        # what `relevant` finds plus dev-correction's turn 2, dev-no-overlap's turn 1 and held-spread's two facts.
        rows = ['| question_words_first | dev | 7 of 7 | 6 of 6 | 1 | 78.7 |',
                '| question_words_first | held-out | 6 of 7 | 5 of 6 | 1 | 80.3 |']
        self.assertIn('\n'.join(rows) + '\n', result.stdout)
        for row in rows:  # the README shows the same rows
            self.assertIn(f'`{row}`', README)
        self.assertIn('.venv/bin/python evaluate.py --rules my_rules.py --format table\n', README)
        self.assertEqual(result.stdout.count('\n'), 2 + 10 + 2)

    def test_show_and_turns_and_compare_work_with_a_rules_files_rule(self):
        path = self.write(MY_RULES, 'my_rules.py')
        shown = in_process(evaluate, '--rules', str(path), '--show', 'dev-correction',
                           '--strategy', 'question_words_first')
        self.assertEqual((shown.returncode, shown.stderr), (0, ''))
        self.assertTrue(shown.stdout.startswith('question_words_first on dev-correction (dev, corrected decision)\n'))
        self.assertIn('[turn 2, user] 12 tokens\n  + required fact: "Switch to PostgreSQL instead of MySQL."', shown.stdout)
        turns = in_process(evaluate, '--rules', str(path), '--format', 'turns')
        # dev-correction: turn 1 shares `use` with the question and comes first; turn 3 (a long log) does not
        # fit; turn 2 does, and brings the required fact beside the stale one.
        self.assertIn('| question_words_first             | x  | x  | . | 0     | 1 of 1      | 1                |',
                      turns.stdout)
        compared = in_process(evaluate, '--rules', str(path), '--compare', str(RECORDED))
        self.assertEqual(compared.returncode, 1)
        lines = compared.stdout.splitlines()
        rule_files_sha = hashlib.sha256((HERE / 'rule_files.py').read_bytes()).hexdigest()
        self.assertEqual(lines[0], f'code_sha256 rule_files.py: None -> {rule_files_sha}')
        self.assertTrue(lines[1].startswith("rule_files: None -> [{'file': 'my_rules.py', 'sha256': '"))
        self.assertEqual(lines[2:], ['question_words_first: rule added'])
        written = Path(self.folder.name, 'with-rules.json')
        same = in_process(evaluate, '--rules', str(path), '--output', str(written))
        self.assertEqual(same.returncode, 0)
        unchanged = in_process(evaluate, '--rules', str(path), '--compare', str(written))
        self.assertEqual((unchanged.returncode, unchanged.stdout.startswith('no change against')), (0, True))

    def test_show_prompt_prints_the_best_possible_too(self):
        result = in_process(evaluate, '--show', 'dev-correction', '--prompt')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertIn('=== best possible (reads the labels): 57 input tokens ===\n<bos><|turn>system\n', result.stdout)
        self.assertEqual(result.stdout.count('=== '), 5)

    def test_a_message_the_standard_layout_cannot_label_is_labelled_by_its_index_from_0(self):
        path = self.write('RULES = {"bare": lambda case, count: [{"role": "user", "content": case["current"]}]}\n')
        result = in_process(evaluate, '--rules', str(path), '--show', 'dev-correction', '--strategy', 'bare')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertIn('\n[message 0, user] ', result.stdout)


if __name__ == '__main__':
    unittest.main()
