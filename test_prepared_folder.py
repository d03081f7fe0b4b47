"""Tests of prepared_folder.py as a command: does it tell a valid prepared folder from any other?

    python -m unittest -v test_prepared_folder.py

What makes a folder valid (check_prepared) is tested case by case in
test_prepare.py, which prepares folders and damages them; here only the
command's answer, its exit status and its one line are checked.
"""
import json
import os
from pathlib import Path
import shutil
import subprocess
import sys
import tempfile
import unittest

from prepared_folder import PREPARED, PREPARED_ENV, PREPARED_JSON

HERE = Path(__file__).resolve().parent


def prepared_folder_py(folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, PREPARED_ENV: str(folder)}
    return subprocess.run([sys.executable, 'prepared_folder.py'], cwd=HERE, env=env, capture_output=True, text=True,
                          timeout=60)


class CommandTest(unittest.TestCase):
    def test_the_prepared_folder_is_reported_complete_and_valid(self):
        source = json.loads((PREPARED / PREPARED_JSON).read_text(encoding='utf-8'))['source']
        result = prepared_folder_py(PREPARED)
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertEqual(result.stdout, f'{PREPARED} is complete and valid (prepared from {source})\n')

    def test_an_empty_folder_is_refused_in_one_line_that_says_why(self):
        with tempfile.TemporaryDirectory() as folder:
            result = prepared_folder_py(Path(folder))
        self.assertEqual((result.returncode, result.stdout), (2, ''))
        self.assertEqual(result.stderr, f'prepared_folder.py: {folder} is not a valid prepared counter: '
                                        f'{Path(folder) / PREPARED_JSON} does not exist; run prepare.py\n')

    def test_a_changed_file_is_refused_naming_it(self):
        with tempfile.TemporaryDirectory() as folder:
            copy = Path(folder) / 'prepared'
            shutil.copytree(PREPARED, copy)
            with open(copy / 'tokenizer.json', 'a', encoding='utf-8') as file:
                file.write(' ')
            result = prepared_folder_py(copy)
        self.assertEqual(result.returncode, 2)
        self.assertIn(f'{copy / "tokenizer.json"} no longer matches its recorded size and sha256', result.stderr)
        self.assertEqual(result.stderr.count('\n'), 1)


if __name__ == '__main__':
    unittest.main()
