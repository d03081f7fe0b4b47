"""Tests for the LoCoMo figures in the docs: the README's against docs/locomo.md's, and both against the real file.

    .venv/bin/python -m unittest -v test_locomo_cases_docs.py
    LOCOMO10=/path/to/locomo10.json .venv/bin/python -m unittest -v test_locomo_cases_docs.py   # the real file too

LoCoMo's data is not in this repository (CC BY-NC 4.0). With LOCOMO10 naming the real file, RealFileTest
converts it and checks docs/locomo.md's and the README's figures against it; without it, a test still checks
that the README's figures are the ones docs/locomo.md's tables hold. Files are only ever written into temporary
directories.
"""
import hashlib
import os
from pathlib import Path
import re
import subprocess
import sys
import tempfile
import unittest

from case_set import load_cases
from lab_files import read_json
from scorer import totals
from strategies import build_request
from test_support_fixtures import HERE
from test_support_locomo import PAGE, prose
from tokenizer import counter

LOCOMO_SHA256 = '79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4'
README = HERE / 'README.md'


class ReadmeAgreesWithThePageTest(unittest.TestCase):
    """The README's short LoCoMo figures against docs/locomo.md's full tables (which RealFileTest measures)."""

    def page_tables(self) -> list[dict]:
        """docs/locomo.md's per-kind tables in page order (4,096, then 16,384): (strategy, kind) -> the other cells."""
        blocks = re.findall(r'^\| Strategy \| Kind \|.*\n\|[-|]+\|\n((?:\|.*\n)+)', PAGE.read_text(encoding='utf-8'),
                            flags=re.MULTILINE)
        self.assertEqual(len(blocks), 2)
        tables = []
        for block in blocks:
            rows = [[cell.strip() for cell in line.strip('|').split('|')] for line in block.splitlines()]
            tables.append({(row[0], row[1]): row[2:] for row in rows})
        return tables

    def sweep_table(self) -> dict:
        """docs/locomo.md's budget-sweep table: rule -> {allowance: evidence utterances found}."""
        block = re.search(r'^\| Rule \|(.*)\|\n\|[-|]+\|\n((?:\|.*\n)+)', PAGE.read_text(encoding='utf-8'),
                          flags=re.MULTILINE)
        rooms = [int(cell.strip().replace(',', '')) for cell in block[1].split('|')]
        rows = [[cell.strip() for cell in line.strip('|').split('|')] for line in block[2].splitlines()]
        return {row[0]: dict(zip(rooms, (int(cell.replace(',', '')) for cell in row[1:]))) for row in rows}

    def test_readme_sweep_figures_are_the_pages_and_agree_with_its_full_tables(self):
        sweep, (four, sixteen) = self.sweep_table(), self.page_tables()
        for room, table in ((3520, four), (15808, sixteen)):  # the allowances of 4,096 and 16,384
            for rule in ('recent', 'relevant', 'notes', 'hybrid', 'bm25', 'dense', 'fused'):
                with self.subTest(room=room, rule=rule):
                    found = sum(int(cells[0].split(' of ')[0]) for (name, _), cells in table.items() if name == rule)
                    self.assertEqual(sweep[rule][room], found)
        best = sweep['best possible']
        sentence = (f"at 3,520 input tokens `fused` finds {sweep['fused'][3520]:,} of the {best[3520]:,} evidence "
                    f"utterances where `relevant` finds {sweep['relevant'][3520]:,} and the best possible selection "
                    f'all of them. `bm25` leads at the smallest budget')
        self.assertIn(sentence, prose(README))
        smallest, largest = min(best), max(best)
        self.assertEqual(max(sweep, key=lambda rule: sweep[rule][smallest] if rule != 'best possible' else -1), 'bm25')
        self.assertEqual(max(sweep, key=lambda rule: sweep[rule][largest] if rule != 'best possible' else -1), 'dense')
        self.assertIn(f'`dense` is best at {largest:,}', prose(README))
        self.assertGreaterEqual(best[1472], best[3520] - 4)  # "almost everything by 1,472 tokens"

    def test_readme_totals_are_what_the_full_tables_hold(self):
        totals = []
        for table in self.page_tables():
            found = {name: sum(int(table[name, kind][0].split(' of ')[0]) for kind in
                               ('temporal', 'open-domain', 'multi-hop', 'single-hop'))
                     for name in ('recent', 'relevant', 'notes', 'hybrid')}
            totals.append(found)
        four, sixteen = totals
        evidence = sum(int(cells[0].split(' of ')[1]) for (name, _), cells in self.page_tables()[0].items()
                       if name == 'recent')
        sentence = (f"In total, at 4,096: `recent` finds {four['recent']:,} of the {evidence:,} evidence utterances, "
                    f"`relevant` {four['relevant']:,}, `notes` {four['notes']:,} and `hybrid` {four['hybrid']:,}; "
                    f"at 16,384: {sixteen['recent']:,}, {sixteen['relevant']:,}, {sixteen['notes']:,} and "
                    f"{sixteen['hybrid']:,}.")
        self.assertIn(sentence, prose(PAGE))
        summary = re.search(r'(\d+) questions read, (\d+) cases written', PAGE.read_text(encoding='utf-8'))
        questions, cases = map(int, summary.groups())
        self.assertIn(f'with {questions:,} questions whose evidence utterances are labelled', prose(README))
        self.assertIn(f'({cases:,} cases; LoCoMo labels no stale facts)', prose(README))


@unittest.skipUnless(os.environ.get('LOCOMO10'), 'set LOCOMO10 to the downloaded locomo10.json to check the docs')
class RealFileTest(unittest.TestCase):
    """docs/locomo.md's and the README's LoCoMo figures, measured again from the real file (a few minutes; not in
    CI, which lacks it)."""

    def convert(self, folder: str, *options: str) -> tuple[Path, str]:
        source = Path(os.environ['LOCOMO10'])
        self.assertEqual(hashlib.sha256(source.read_bytes()).hexdigest(), LOCOMO_SHA256)
        output = Path(folder) / 'locomo-cases.json'
        result = subprocess.run([sys.executable, 'locomo_cases.py', str(source), '--output', str(output), *options],
                                cwd=HERE, capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        return output, result.stderr

    def test_summary_line_and_counts_match_a_conversion_of_the_real_file(self):
        with tempfile.TemporaryDirectory() as folder:
            _, stderr = self.convert(folder)
        self.assertIn(stderr.strip(), PAGE.read_text(encoding='utf-8'))
        questions, cases = map(int, re.search(r'(\d+) questions read, (\d+) cases written', stderr).groups())
        self.assertIn(f'with {questions:,} questions whose evidence utterances are labelled', prose(README))
        self.assertIn(f'({cases:,} cases; LoCoMo labels no stale facts)', prose(README))

    def test_tables_and_figures_are_what_evaluate_gives_for_the_real_file(self):
        page = PAGE.read_text(encoding='utf-8')
        found, totals, best_most, whole = {}, set(), 0, []
        for context in ('4096', '16384'):
            with self.subTest(context=context), tempfile.TemporaryDirectory() as folder:
                output, _ = self.convert(folder, '--context-limit', context)
                report_path = Path(folder) / 'report.json'
                result = subprocess.run([sys.executable, 'evaluate.py', '--cases', str(output), '--rules',
                                         'field_rules.py', '--format', 'table', '--group', 'kind',
                                         '--output', str(report_path)],
                                        cwd=HERE, capture_output=True, text=True, timeout=1800)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn('\n' + result.stdout + '\n', page)
                report = read_json(report_path, 'report')
                found[context] = [f"{sum(row['required_found'] for row in rows):,}" for rows in report['cases'].values()]
                totals.add(sum(row['required_total'] for row in report['cases']['recent']))
                best_most = max(best_most, *(row['input_tokens'] for row in report['best_possible']['cases']))
                if context == '4096':
                    whole = self.whole_conversations(load_cases(output))
        self.assertEqual(len(totals), 1)
        four, sixteen = found['4096'], found['16384']
        turns, tokens = zip(*whole)
        in_total = (f'In total, at 4,096: `recent` finds {four[0]} of the {totals.pop():,} evidence utterances, '
                    f'`relevant` {four[1]}, `notes` {four[2]} and `hybrid` {four[3]}; at 16,384: {sixteen[0]}, '
                    f'{sixteen[1]}, {sixteen[2]} and {sixteen[3]}.')
        field = (f'at 4,096, `bm25` {four[4]}, `dense` {four[5]} and `fused` {four[6]}; at 16,384: {sixteen[4]}, '
                 f'{sixteen[5]} and {sixteen[6]}.')
        self.assertIn(field, prose(PAGE))
        size = (f'({min(turns)} to {max(turns)} turns here; as one request with this lab\'s counter, '
                f'{min(tokens):,} to {max(tokens):,} tokens)')
        self.assertIn(in_total, prose(PAGE))
        for path in (README, PAGE):
            with self.subTest(path.name):
                self.assertIn(size, prose(path))
        self.assertIn(f'at most {best_most:,} in any case', prose(PAGE))

    def test_the_sweep_table_and_picture_are_what_budget_sweep_gives_for_the_real_file(self):
        command = re.search(r'^\.venv/bin/python (budget_sweep\.py --cases locomo-cases\.json .*)$',
                            README.read_text(encoding='utf-8'), flags=re.MULTILINE)[1].split()
        with tempfile.TemporaryDirectory() as folder:
            cases, _ = self.convert(folder)
            picture = Path(folder) / 'locomo-sweep.png'
            options = {'--cases': str(cases), '--output': str(Path(folder) / 'locomo-sweep.json'),
                       '--plot': str(picture)}
            argv = [options.get(before, word) for before, word in zip([None, *command], command)]
            result = subprocess.run([sys.executable, *argv], cwd=HERE, capture_output=True, text=True, timeout=1800)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn('\n' + result.stdout + '\n', PAGE.read_text(encoding='utf-8'))
            self.assertEqual(picture.read_bytes(), (HERE / 'docs' / 'locomo-sweep.png').read_bytes())

    def whole_conversations(self, cases: list[dict]) -> list[tuple[int, int]]:
        """(turns, tokens of the whole conversation as one request) for each distinct conversation."""
        seen = {}
        for case in cases:
            history = case['history']
            if id(history) not in seen:  # load_cases shares one history among the cases of a conversation
                seen[id(history)] = (len(history), counter()(build_request(case, range(len(history)))))
        return list(seen.values())


if __name__ == '__main__':
    unittest.main()
