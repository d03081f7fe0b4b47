"""Tests for how budget_sweep.py runs the garbage collector (collected_less): less often while the sweep runs, and
as it was afterwards, whatever happened.

    .venv/bin/python -m unittest -v test_budget_sweep_collection   (a few seconds)

Each test is named after the failure it pins. Nothing is written to disk.
"""
import gc
import json
from pathlib import Path
import tempfile
import unittest
from unittest import mock

import budget_sweep
from budget_sweep import SWEEP_COLLECTION, sweep_report
from common import LabError
from test_support_fixtures import HERE


def collector() -> tuple:
    return gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()


class CollectionTest(unittest.TestCase):
    def test_the_sweep_runs_with_the_collector_on_at_its_thresholds(self):
        seen = []
        with mock.patch.object(budget_sweep, 'check_reserved', lambda path, cases: seen.append(collector())):
            sweep_report(HERE / 'cases.json', [256], {}, [])
        self.assertEqual(seen[0], (True, SWEEP_COLLECTION, 0))

    def test_the_collector_is_as_before_after_a_sweep_or_a_refused_case_set_and_stays_off_if_it_was(self):
        self.addCleanup(gc.enable)
        with tempfile.TemporaryDirectory() as folder:
            broken = Path(folder) / 'broken.json'
            broken.write_text(json.dumps({'cases': 'none'}), encoding='utf-8')
            for enable in (gc.enable, gc.disable):
                enable()
                before = collector()
                sweep_report(HERE / 'cases.json', [256], {}, [])
                self.assertEqual(collector(), before)
                with self.assertRaises(LabError):
                    sweep_report(broken, [256], {}, [])
                self.assertEqual(collector(), before)


if __name__ == '__main__':
    unittest.main()
