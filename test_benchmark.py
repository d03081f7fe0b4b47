"""Tests for benchmark.py's workloads (its seeded synthetic cases too), its output and its rule timing (--cases FILE);
never the timings themselves, which depend on the machine.

    .venv/bin/python -m unittest -v test_benchmark.py   (about 5 s)
"""
import contextlib
import io
import json
import os
from pathlib import Path
import random
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import benchmark
from benchmark import as_agent, chat_case, generated_cases, synthetic_case
from case_set import check_case, load_cases
from scorer import facts_in
from shapes import at_limit, build_request
from strategies import RULES
from test_support_fixtures import HERE
from tokenizer import counter

ONE_RULE = "from strategies import recent\n\nRULES = {'newest_turns': recent}\n"


def kernel_peak_mib() -> float | None:
    """This process's peak resident size as the kernel's /proc/self/status states it (VmHWM, in KiB), in MiB;
    None where there is no such file (not Linux)."""
    try:
        status = Path('/proc/self/status').read_text(encoding='ascii')
    except OSError:
        return None
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith('VmHWM:')) / 1024


def turn_tokens(turn: dict) -> int:
    """What a turn adds to a request: its two messages with their delimiters (the whole render, less <bos> and
    the generation prompt)."""
    messages = [{'role': 'user', 'content': turn['user']}, {'role': 'assistant', 'content': turn['assistant']}]
    return len(counter().encode(counter().prompt(messages))) - counter().fixed


class ChatWorkloadTest(unittest.TestCase):
    def test_short_turns_are_20_to_80_tokens_and_pasted_logs_1000_to_2000(self):
        rng = random.Random(1)
        short = [turn_tokens(benchmark.short_turn(rng)) for _ in range(300)]
        pasted = [turn_tokens(benchmark.log_turn(rng, 7, rng.randint(*benchmark.PASTE_LINES))) for _ in range(40)]
        self.assertGreaterEqual(min(short), 20)
        self.assertLessEqual(max(short), 80)
        self.assertGreaterEqual(min(pasted), 1000)
        self.assertLessEqual(max(pasted), 2000)

    def test_every_case_has_its_own_history_and_facts_at_varied_depths(self):
        cases = benchmark.generated_cases(benchmark.chat_case, 12, 300, benchmark.SWEEP_SEED)
        turns = [turn['user'] for case in cases for turn in case['history']]
        self.assertEqual(len(set(turns)), len(turns))
        depths = {next(i for i, turn in enumerate(case['history']) if case['required'][0] in turn['user'])
                  for case in cases}
        self.assertGreater(len(depths), 8)

    def test_settings_share_histories_and_differ_only_in_budget(self):
        cases = benchmark.generated_cases(benchmark.chat_case, 2, 300, benchmark.SWEEP_SEED)
        small, large = at_limit(cases, 4096), at_limit(cases, 65536)
        self.assertIs(small[0]['history'], large[0]['history'])
        self.assertEqual((small[0]['budget'], large[0]['budget']['context_limit']),
                         ({'context_limit': 4096, 'max_new_tokens': 512, 'margin': 64}, 65536))


    def test_no_case_of_either_part_fails_the_case_check_at_any_seed_shortest_history_or_setting(self):
        # benchmark.py does not check the cases it generates: every field is made from constants and the seed.
        for seed in range(20):
            for case in benchmark.generated_cases(benchmark.synthetic_case, 2, 3, seed):
                check_case(f"case {case['id']}", case)
            chat = benchmark.generated_cases(benchmark.chat_case, 2, 3, seed)
            for context_limit, _ in benchmark.SWEEP:
                for case in at_limit(chat, context_limit):
                    check_case(f"case {case['id']}", case)


class OutputTest(unittest.TestCase):
    def test_sweep_reports_every_setting_in_the_json_line_and_progress_on_stderr(self):
        out, err = io.StringIO(), io.StringIO()
        peak_before = kernel_peak_mib()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = benchmark.main(['--sweep', '--sweep-cases', '1'])
        peak_after = kernel_peak_mib()
        figures = json.loads(out.getvalue().splitlines()[-1])
        settings = [(s['context_limit'], s['turns'], s['cases']) for s in figures['sweep']]
        self.assertEqual((status, settings), (0, [(4096, 300, 1), (16384, 300, 1), (65536, 300, 1), (4096, 1200, 1)]))
        seconds = {(s['context_limit'], s['turns']): s['seconds'] for s in figures['sweep']}
        self.assertEqual(figures['worst_over_bound'], max(s['over_bound'] for s in figures['sweep']))
        # The growths come from unrounded seconds; the rounded ones give them to within a few per cent.
        self.assertAlmostEqual(figures['budget_growth'] / (seconds[65536, 300] / seconds[4096, 300]), 1, delta=0.1)
        self.assertAlmostEqual(figures['turns_growth'] / (seconds[4096, 1200] / seconds[4096, 300]), 1, delta=0.1)
        self.assertEqual(sorted(figures['targets_met']), ['budget_growth', 'turns_growth', 'worst_over_bound'])
        with self.subTest('peak_rss_mb is the whole run\'s peak resident size in MiB'):
            if peak_before is None:
                self.skipTest('no /proc/self/status to read the peak from')
            # Read at the end of main(), it lies between the peaks the kernel stated before and after the run, to
            # within its rounding to 0.1 and the kernel's own slack: Linux keeps resident-page counts per CPU and
            # adds them up lazily, so each of the three it sums (file, anonymous and shared pages) may be off by up
            # to max(32, 2 * CPUs) pages per CPU. Seen here: readings 0.26 MiB apart, over one counter's 0.25.
            cpus = os.cpu_count() or 1
            slack = 0.05 + 3 * max(32, 2 * cpus) * cpus * os.sysconf('SC_PAGE_SIZE') / 2 ** 20
            self.assertLessEqual(peak_before - slack, figures['peak_rss_mb'])
            self.assertLessEqual(figures['peak_rss_mb'], peak_after + slack)
        self.assertIn('benchmark.py: sweep 4096 context, 1200 turns: 1 of 1 cases\n', err.getvalue())
        self.assertNotIn('benchmark.py:', out.getvalue())
        # The sweep leaves nothing cached behind.
        self.assertEqual((counter().sizes, counter().lines, counter().turns), ({}, {}, {}))

    def test_docs_speed_names_every_printed_table_and_figure_as_the_benchmark_prints_them(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = benchmark.main(['--generated', '2', '--turns', '5', '--sweep-cases', '1'])
        *tables, last = out.getvalue().splitlines()
        figures = json.loads(last)
        docs = (HERE / 'docs' / 'speed.md').read_text(encoding='utf-8').splitlines()
        headers = [line for line, below in zip(tables, tables[1:]) if below.startswith('|---')]
        self.assertEqual((status, len(headers)), (0, 3))  # the first part's selections, the sweep, the measures
        for header in headers:
            self.assertIn(header, docs)
        named = re.compile(r'^\| ([^|]+ \(`(\w+)`\)) \|')  # `| label (`key`) | value |`
        printed = dict(match.group(2, 1) for match in map(named.match, tables) if match)
        shown = dict(match.group(2, 1) for match in map(named.match, docs) if match)
        self.assertEqual(sorted(printed), sorted(set(figures) - {'sweep', 'targets_met'}))  # every JSON figure named
        self.assertEqual(sorted(figures['targets_met']), ['agent_over_pair', 'budget_growth', 'fast_over_bound',
                                                          'turns_growth', 'worst_over_bound'])  # speedup has none
        self.assertNotIn('target', next(line for line in tables if '(`speedup`)' in line))
        self.assertLessEqual(printed.items(), shown.items())
        self.assertEqual(shown, {key: f'{label} (`{key}`)' for key, label in benchmark.MEASURES.items()})  # --locomo's

    def test_locomo_sweeps_five_limits_then_bounds_it_by_encoding_once_and_one_selection_pass(self):
        sweeps, passes, out = [], [], io.StringIO()
        sweep_limit, run_once = benchmark.sweep_limit, benchmark.timed_run

        def timed(cases, count, what):
            passes.append((what, {case['budget']['context_limit'] for case in cases}, len(cases)))
            return run_once(cases, count, what)

        def limit_rows(cases, limit, *more):
            sweeps.append((limit, len(cases), len(counter().sizes)))  # counted from cold: nothing cached at first
            return sweep_limit(cases, limit, *more)

        with mock.patch.object(benchmark, 'sweep_limit', limit_rows), \
                mock.patch.object(benchmark, 'timed_run', timed), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(io.StringIO()):
            status = benchmark.main(['--sweep', '--sweep-cases', '1', '--locomo', str(HERE / 'cases.json')])
        figures = json.loads(out.getvalue().splitlines()[-1])
        self.assertEqual(status, 0)
        self.assertEqual([(limit, cases) for limit, cases, _ in sweeps], [(limit, 12) for limit in (1024, 2048, 4096,
                                                                                                     8192, 16384)])
        self.assertEqual(sweeps[0][2], 0)
        self.assertEqual(passes, [('LoCoMo selection pass', {4096}, 12)])
        self.assertEqual(figures['locomo_cases'], 12)
        self.assertNotIn('locomo_over_bound', figures['targets_met'])  # reported without a target
        self.assertEqual((counter().sizes, counter().lines), ({}, {}))  # the bound leaves the counter cold


class RuleTimingTest(unittest.TestCase):
    def test_each_rule_runs_on_every_case_twice_in_order_and_its_passes_are_timed_apart(self):
        calls, ticks = [], iter(range(100))
        rules = {name: (lambda case, count, name=name: calls.append((name, case['id'], count))) for name in ('a', 'b')}
        cases = load_cases(HERE / 'cases.json')[:3]
        seconds = benchmark.time_rules(cases, rules, 'the count', clock=lambda: next(ticks))
        ids = [case['id'] for case in cases]
        self.assertEqual(calls, [(name, case, 'the count') for name in ('a', 'b') for _ in range(2) for case in ids])
        # The clock is read at the start and end of each pass: 0-1, 2-3 for a; 4-5, 6-7 for b.
        self.assertEqual(seconds, {'a': (1, 1), 'b': (1, 1)})

    def test_the_table_has_a_row_per_rule_with_two_decimals(self):
        self.assertEqual(benchmark.timing_table({'recent': (1.234, 0.5), 'bm25': (0.015, 0.004)}),
                         '| Rule | First pass, CPU s | Second pass, CPU s |\n|---|---|---|\n'
                         '| recent | 1.23 | 0.50 |\n| bm25 | 0.01 | 0.00 |\n')

    def test_the_command_times_the_four_then_a_rules_files_rules(self):
        with tempfile.TemporaryDirectory() as folder:
            rules = Path(folder) / 'one_rule.py'
            rules.write_text(ONE_RULE, encoding='utf-8')
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = benchmark.main(['--cases', str(HERE / 'cases.json'), '--rules', str(rules)])
        self.assertEqual(status, 0, err.getvalue())
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[0], '| Rule | First pass, CPU s | Second pass, CPU s |')
        self.assertEqual([line.split(' | ')[0].removeprefix('| ') for line in lines[2:]], [*RULES, 'newest_turns'])
        self.assertEqual(err.getvalue(), 'benchmark.py: timing 5 rules on 12 cases\n')

    def test_a_bad_case_set_or_rules_without_cases_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'cases.json'
            path.write_text('[]', encoding='utf-8')
            empty = subprocess.run([sys.executable, 'benchmark.py', '--cases', str(path)], cwd=HERE,
                                   capture_output=True, text=True, timeout=120)
            alone = subprocess.run([sys.executable, 'benchmark.py', '--rules', 'field_rules.py'], cwd=HERE,
                                   capture_output=True, text=True, timeout=120)
            # --locomo's case set is refused before the first part runs: no timings, no progress.
            locomo = subprocess.run([sys.executable, 'benchmark.py', '--locomo', str(path)], cwd=HERE,
                                    capture_output=True, text=True, timeout=120)
        for result in (empty, locomo):
            self.assertEqual((result.returncode, result.stdout, result.stderr),
                             (2, '', f'benchmark.py: {path}: the case set is empty\n'))
        self.assertEqual((alone.returncode, alone.stdout), (2, ''))
        self.assertTrue(alone.stderr.endswith('benchmark.py: error: --rules goes with --cases FILE\n'), alone.stderr)


class SizeTest(unittest.TestCase):
    def test_an_absurd_size_is_refused_in_one_line_before_anything_is_generated(self):
        for argv in (['--turns', '10000000000'], ['--generated', '3000', '--turns', '100'],
                     ['--sweep-cases', '2001'], ['--turns', '9' * 4000, '--generated', '9' * 4000]):
            with self.subTest(argv[1][:12]):
                result = subprocess.run([sys.executable, 'benchmark.py', *argv], cwd=HERE, capture_output=True,
                                        text=True, timeout=120)
                self.assertEqual((result.returncode, result.stdout, result.stderr), (2, '', (
                    'benchmark.py: --generated times --turns may be at most 200,000 turns, and --sweep-cases at most '
                    '2,000: larger case sets would not fit in memory\n')))
        result = subprocess.run([sys.executable, 'benchmark.py', '--turns', '2'], cwd=HERE, capture_output=True,
                                text=True, timeout=120)
        self.assertEqual((result.returncode, result.stderr), (2, 'benchmark.py: --generated and --sweep-cases must be '
                                                                 'at least 1, and --turns at least 3\n'))

    def test_docs_speed_writes_the_sweep_table_as_the_benchmark_prints_it(self):
        docs = (HERE / 'docs' / 'speed.md').read_text(encoding='utf-8')
        header = '| ' + ' | '.join(benchmark.SWEEP_HEADER) + ' |'
        rows = docs[docs.index(header):].split('\n\n')[0].splitlines()[2:]
        keys = ('context_limit', 'turns', 'cases', 'seconds', 'bound_seconds', 'over_bound')
        settings = [dict(zip(keys, (json.loads(cell.replace(',', '')) for cell in row.strip('| ').split(' | ')))) for row in rows]
        self.assertEqual([(s['context_limit'], s['turns']) for s in settings], list(benchmark.SWEEP))
        printed = benchmark.summary_table({'sweep': settings}, []).split('\n\n')[0].splitlines()
        self.assertEqual(printed[2:], rows)


class ReadmeTimingsTest(unittest.TestCase):
    # A time the README states: '54 s and 57 s', '12 to 13 s', 'about 3 minutes'; not a setting ('60 s a case').
    TIME = re.compile(r'(?:about )?\d[\d,.]*(?: s)?(?: (?:and|to) \d[\d,.]*)? (?:s|minutes)\b(?! a case)')

    def test_each_time_the_readme_states_is_one_docs_speed_records_with_its_command_and_date(self):
        readme = (HERE / 'README.md').read_text(encoding='utf-8')
        speed = (HERE / 'docs' / 'speed.md').read_text(encoding='utf-8')
        table = speed[speed.index('## Timings the README states'):]
        recorded = re.findall(r'^\| `([^`]+)` \| .+ \| (2026-\d\d-\d\d[^|]*) \| [^|]+ \|$', table, re.MULTILINE)
        stated = [match for line in readme.splitlines() if not line.startswith(('      {', '.venv'))
                  for match in self.TIME.findall(line)]
        self.assertEqual(sorted(stated), sorted(phrase for phrase, _ in recorded))
        # Where the README dates a time, its paragraph gives the date of the time's latest measure: a figure
        # re-measured in docs/speed.md and not in the README (or the other way round) disagrees here.
        for phrase, measured in recorded:
            paragraph = next(part for part in readme.split('\n\n') if phrase in part)
            dated = re.findall(r'2026-\d\d-\d\d', paragraph)
            self.assertTrue(not dated or max(re.findall(r'2026-\d\d-\d\d', measured)) in dated, phrase)


class GeneratedTest(unittest.TestCase):
    def test_one_seed_gives_the_same_cases_and_another_seed_others(self):
        self.assertEqual(generated_cases(synthetic_case, 3, 20, 7), generated_cases(synthetic_case, 3, 20, 7))
        self.assertNotEqual(generated_cases(chat_case, 3, 20, 7), generated_cases(chat_case, 3, 20, 8))

    def test_every_case_passes_the_case_check_and_its_stale_limit_is_the_corrected_one_plus_seven_per_hour(self):
        for case in generated_cases(synthetic_case, 5, 12, 1):
            with self.subTest(case['id']):
                check_case(f"case {case['id']}", case)  # every planted fact lies in a message of its history
                topic, value = re.fullmatch(r'(\w+) limit is (\d+) per minute', case['required'][0]).groups()
                self.assertEqual(case['stale'], [f'{topic} limit is {int(value) + 7} per hour'])
                self.assertEqual(case['current'], f'What is the {topic} limit, and who owns {topic}?')
                self.assertEqual(case['split'], 'held_out' if int(case['id'].split('-')[1]) % 2 == 0 else 'dev')


class AgentFormTest(unittest.TestCase):
    def test_each_turn_becomes_the_user_message_a_call_and_the_reply_as_its_result(self):
        case = {'id': 'x', 'history': [{'user': 'Hi', 'assistant': 'Yes'}], 'required': [], 'stale': []}
        call = {'id': 'call_0', 'type': 'function', 'function': {'name': 'recall', 'arguments': {}}}
        self.assertEqual(as_agent(case), {'id': 'x', 'required': [], 'stale': [], 'tools': [], 'history': [[
            {'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': '', 'tool_calls': [call]},
            {'role': 'tool', 'tool_call_id': 'call_0', 'content': 'Yes'}]]})
        self.assertEqual(case['history'], [{'user': 'Hi', 'assistant': 'Yes'}])  # the case itself is left as it was

    def test_the_agent_form_holds_the_same_facts_as_the_pair_form(self):
        for case in generated_cases(synthetic_case, 3, 12, 2):
            every = range(len(case['history']))
            self.assertEqual(facts_in(as_agent(case), build_request(as_agent(case), every)),
                             facts_in(case, build_request(case, every)))
            self.assertEqual(facts_in(case, build_request(case, every)), (case['required'], case['stale']))


if __name__ == '__main__':
    unittest.main()
