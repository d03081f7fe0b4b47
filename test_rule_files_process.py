"""Tests for the rules process (rule_files.py, rules_process.py): whatever a rule does, the lab ends it in one line and survives.

    .venv/bin/python -m unittest -v test_rule_files_process.py

The attacks of issues 24 and 33 are made for real in a real rules process: exceptions of any kind, megabyte
messages, lone surrogates, deep nesting, sys.exit, prints, loops stopped by a short --rule-timeout, rules that
fork or hold the GIL, a killed lab, look-alike names. Each test is named after the failure it pins; rules files
are written into temporary folders only (test_support_rules.RulesFolder).
"""
import contextlib
import io
import json
import os
import re
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import time
import unittest

from benchmark import rule_timing
import rule_files
from rule_files import RuleError, load_rule_files
from test_support_fixtures import HERE
from test_support_runs import evaluate_py
from test_support_rules import README_RULES as MY_RULES, RulesFolder, case_named
from tokenizer import counter


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
            import gc, json, rules_process
            pipe = next(found for found in gc.get_objects() if isinstance(found, rules_process.RemoteCount))
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
                                                                                    counter())
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
            rule(case_named('dev-latest'), counter())
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
            rule(case_named('dev-latest'), counter())
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
        # with the manifest, which the test support test_cli imports reads as it loads
        tracked = subprocess.run(['git', 'ls-files', '-z', '*.py', 'requirements.txt', 'tokenizer-manifest.json'],
                                 cwd=HERE, capture_output=True, check=True, timeout=60).stdout.decode().split('\0')
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


if __name__ == '__main__':
    unittest.main()
