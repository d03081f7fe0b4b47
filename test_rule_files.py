"""Tests for rules files: the plug-in contract of `evaluate.py --rules FILE.py` (rule_files.py).

    .venv/bin/python -m unittest -v test_rule_files.py

Each test is named after the failure it pins. Figures come from the recorded
report or are worked out by hand; rules files are written into temporary folders only.
"""
import copy
import hashlib
import json
import re
from pathlib import Path
import subprocess
import sys
import tempfile
import textwrap
import unittest

from case_set import grade, load_cases
from common import CODE_FILES
from evaluate import report
from rule_files import carried_turns, load_rule_files
from tokenizer import count_request
from views import report_table

HERE = Path(__file__).resolve().parent
RECORDED = HERE / 'evaluation-result.json'

# The README's "Write your own rule" file, word for word: the test runs exactly this text.
README = (HERE / 'README.md').read_text(encoding='utf-8')
# The rules file of the README's "Your own rule", exactly as a reader would paste it.
MY_RULES = re.search(r'Save this as `my_rules.py`.*?\n```python\n(.*?)```\n', README, re.S)[1]


def evaluate_py(*args: str) -> subprocess.CompletedProcess:
    """The real command, reading the prepared folder this process reads."""
    return subprocess.run([sys.executable, 'evaluate.py', *args], cwd=HERE, capture_output=True, text=True,
                          timeout=300)


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

    def rule(self, body: str, name: str = 'mine'):
        """The wrapped rule `name` of a file whose rule function has this body."""
        path = self.write('from strategies import build_request\n\ndef rule(case, count):\n'
                          + textwrap.indent(textwrap.dedent(body), '    ') + f'\n\nRULES = {{{name!r}: rule}}\n')
        return load_rule_files([path])[0][name]


class ContractTest(RulesFolder):
    def test_a_rule_never_sees_the_labels(self):
        path = self.write('SEEN = []\ndef rule(case, count):\n    SEEN.append(sorted(case))\n'
                          '    return [{"role": "user", "content": case["current"]}]\nRULES = {"mine": rule}\n')
        rules, _ = load_rule_files([path])
        rules['mine'](case_named('dev-correction'), count_request)
        module = next(module for module in list(sys.modules.values())
                      if getattr(module, '__file__', None) == str(path.resolve()))
        self.assertEqual(module.SEEN, [['budget', 'current', 'history', 'id', 'instructions', 'kind', 'split']])

    def test_a_rule_that_changes_its_case_cannot_change_the_labs(self):
        case = case_named('dev-correction')
        before = copy.deepcopy(case)
        mine = self.rule('''
            case['history'][0]['user'] = 'changed'
            case['history'].append({'user': 'x', 'assistant': 'y'})
            case['budget']['context_limit'] = 1
            case['current'] = 'changed'
            return build_request(case, [0])''')
        mine(case, count_request)
        self.assertEqual(case, before)

    def test_the_lab_counts_the_request_itself_when_the_rule_says_another_size(self):
        # relevant keeps turn 1 of dev-correction in 57 input tokens (the recorded report).
        selected = self.rule("return {'messages': build_request(case, [0]), 'turns': [2], 'notes': 5, 'input_tokens': 1}")(
            case_named('dev-correction'), count_request)
        self.assertEqual((selected['input_tokens'], selected['turns'], selected['notes']), (57, [0], 0))
        self.assertEqual(sorted(selected), ['input_tokens', 'messages', 'notes', 'turns'])

    def test_a_plain_list_of_messages_is_a_request(self):
        selected = self.rule('return build_request(case, [0, 1])')(case_named('dev-correction'), count_request)
        row = grade(case_named('dev-correction'), selected)
        self.assertEqual((row['turns'], row['required_found'], row['stale_included']), ([0, 1], 1, ['We will use MySQL']))

    def test_a_request_over_the_allowance_is_graded_and_marked_not_refused(self):
        # dev-old-decision's history holds a turn larger than the whole 256-token allowance.
        case = case_named('dev-old-decision')
        row = grade(case, self.rule('return build_request(case, [0, 1, 2])')(case, count_request))
        self.assertEqual((row['turns'], row['within_budget'], row['required_found']), ([0, 1, 2], False, 1))
        self.assertGreater(row['input_tokens'], 256)


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
            self.assertEqual(carried_turns(self.HISTORY, messages), [])

    def test_a_repeated_turn_takes_the_earliest_free_copy_and_a_turn_sent_twice_counts_once(self):
        once = self.messages(('user', 'a'), ('assistant', 'b'), ('user', 'q'))
        twice = self.messages(('user', 'a'), ('assistant', 'b'), ('user', 'a'), ('assistant', 'b'), ('user', 'q'))
        thrice = [*twice[:2], *twice]
        cd_twice = self.messages(('user', 'c'), ('assistant', 'd'), ('user', 'c'), ('assistant', 'd'))
        self.assertEqual(carried_turns(self.HISTORY, once), [0])
        self.assertEqual(carried_turns(self.HISTORY, twice), [0, 2])
        self.assertEqual(carried_turns(self.HISTORY, thrice), [0, 2])
        self.assertEqual(carried_turns(self.HISTORY, cd_twice), [1])

    def test_turns_are_found_in_any_order_the_rule_sends_them(self):
        newest_first = self.messages(('user', 'c'), ('assistant', 'd'), ('user', 'a'), ('assistant', 'b'))
        self.assertEqual(carried_turns(self.HISTORY[:2], newest_first), [0, 1])


class RefusalTest(RulesFolder):
    """Every refusal through the real command: exit 2, nothing on stdout, one line naming file, rule and case."""

    def refused(self, *paths: Path, extra: tuple = ()) -> str:
        result = evaluate_py(*[arg for path in paths for arg in ('--rules', str(path))], *extra)
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
            self.assertIn(f'{path}: rule {name}: the name is taken by the lab', self.refused(path))
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
                                             "expected a list of chat messages ({'role', 'content'}) or a dict with "
                                             "'messages'\n")

    def test_an_exception_in_a_rule_gives_the_last_line_of_the_rules_file_it_passed(self):
        path = self.write('''\
            from common import allowance


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

    def test_an_unknown_strategy_for_show_is_one_line_listing_the_rules(self):
        path = self.write(MY_RULES)
        self.assertEqual(self.refused(path, extra=('--show', 'dev-latest', '--strategy', 'nope')),
                         'evaluate.py: --strategy nope: no such rule; the rules are: recent, relevant, notes, hybrid, '
                         'question_words_first\n')


class ReportTest(RulesFolder):
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
        path = self.write('from strategies import build_request\n'
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
        result = evaluate_py('--rules', str(path), '--format', 'table')
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
        shown = evaluate_py('--rules', str(path), '--show', 'dev-correction', '--strategy', 'question_words_first')
        self.assertEqual((shown.returncode, shown.stderr), (0, ''))
        self.assertTrue(shown.stdout.startswith('question_words_first on dev-correction (dev, corrected decision)\n'))
        self.assertIn('[turn 2, user] 12 tokens\n  + required fact: "Switch to PostgreSQL instead of MySQL."', shown.stdout)
        turns = evaluate_py('--rules', str(path), '--format', 'turns')
        # dev-correction: turn 1 shares `use` with the question and comes first; turn 3 (a long log) does not
        # fit; turn 2 does, and brings the required fact beside the stale one.
        self.assertIn('| question_words_first             | x  | x  | . | 0     | 1 of 1      | 1                |',
                      turns.stdout)
        compared = evaluate_py('--rules', str(path), '--compare', str(RECORDED))
        self.assertEqual(compared.returncode, 1)
        lines = compared.stdout.splitlines()
        rule_files_sha = hashlib.sha256((HERE / 'rule_files.py').read_bytes()).hexdigest()
        self.assertEqual(lines[0], f'code_sha256 rule_files.py: None -> {rule_files_sha}')
        self.assertTrue(lines[1].startswith("rule_files: None -> [{'file': 'my_rules.py', 'sha256': '"))
        self.assertEqual(lines[2:], ['question_words_first: rule added'])
        same = evaluate_py('--rules', str(path), '--output', str(Path(self.folder.name, 'with-rules.json')))
        self.assertEqual(same.returncode, 0)
        unchanged = evaluate_py('--rules', str(path), '--compare', str(Path(self.folder.name, 'with-rules.json')))
        self.assertEqual((unchanged.returncode, unchanged.stdout.startswith('no change against')), (0, True))

    def test_show_prompt_prints_the_best_possible_too(self):
        result = evaluate_py('--show', 'dev-correction', '--prompt')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertIn('=== best possible (reads the labels): 57 input tokens ===\n<bos><|turn>system\n', result.stdout)
        self.assertEqual(result.stdout.count('=== '), 5)

    def test_a_message_the_standard_layout_cannot_label_is_labelled_by_position(self):
        path = self.write('RULES = {"bare": lambda case, count: [{"role": "user", "content": case["current"]}]}\n')
        result = evaluate_py('--rules', str(path), '--show', 'dev-correction', '--strategy', 'bare')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertIn('\n[message 1, user] ', result.stdout)


if __name__ == '__main__':
    unittest.main()
