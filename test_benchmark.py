"""Tests for benchmark.py's workloads and output; its timings are not tested (they depend on the machine).

    .venv/bin/python -m unittest -v test_benchmark.py
"""
import contextlib
import io
import json
from pathlib import Path
import random
import re
import subprocess
import sys
import unittest

import benchmark
from strategies import as_messages
from tokenizer import counter

HERE = Path(__file__).resolve().parent


def kernel_peak_mib() -> float | None:
    """This process's peak resident size as the kernel's /proc/self/status states it (VmHWM, in KiB), in MiB;
    None where there is no such file (not Linux)."""
    try:
        status = Path('/proc/self/status').read_text(encoding='ascii')
    except OSError:
        return None
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith('VmHWM:')) / 1024


def turn_tokens(turn: dict) -> int:
    """What a turn adds to a request: its two messages with their delimiters."""
    return counter().count(as_messages(turn)) - counter().fixed


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
        small, large = benchmark.with_budget(cases, 4096), benchmark.with_budget(cases, 65536)
        self.assertIs(small[0]['history'], large[0]['history'])
        self.assertEqual((small[0]['budget'], large[0]['budget']['context_limit']),
                         ({'context_limit': 4096, 'max_new_tokens': 512, 'margin': 64}, 65536))


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
            # Read at the end of main(), it lies between the peaks the kernel stated before and after the run
            # (to within its rounding to 0.1).
            self.assertLessEqual(peak_before - 0.05, figures['peak_rss_mb'])
            self.assertLessEqual(figures['peak_rss_mb'], peak_after + 0.05)
        self.assertIn('benchmark.py: sweep 4096 context, 1200 turns: 1 of 1 cases\n', err.getvalue())
        self.assertNotIn('benchmark.py:', out.getvalue())
        self.assertEqual(counter().pieces, {})  # the sweep leaves no cached pieces behind

    def test_docs_speed_names_every_printed_table_and_figure_as_the_benchmark_prints_them(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = benchmark.main(['--cases', '2', '--turns', '5', '--sweep-cases', '1'])
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
        self.assertEqual(shown, printed)

    def test_help_prints_the_usage_and_exits_0(self):
        result = subprocess.run([sys.executable, 'benchmark.py', '--help'], cwd=HERE, capture_output=True, text=True)
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertTrue(result.stdout.startswith('usage: benchmark.py'))
        self.assertIn('--sweep', result.stdout)


if __name__ == '__main__':
    unittest.main()
