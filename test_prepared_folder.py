"""Tests of prepared_folder.py as a command: does it tell a valid prepared folder from any other?

    .venv/bin/python -m unittest -v test_prepared_folder.py

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

from cli import python_command
from prepared_folder import PREPARED, PREPARED_ENV, PREPARED_JSON

PYTHON = python_command()  # how the advice starts Python: .venv/bin/python from the lab's venv

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
                                        f'{Path(folder) / PREPARED_JSON} does not exist; run `{PYTHON} prepare.py`\n')

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



class DamagedManifestTest(unittest.TestCase):
    """Both readers of tokenizer-manifest.json, prepared_folder.py and tokenizer.py, refuse a damaged one in one
    line naming the file and what is off, with the checker prepare.py uses (test_prepare.py tests it key by key)."""

    def run_with_manifest(self, script: str, text: str) -> tuple[Path, subprocess.CompletedProcess]:
        with tempfile.TemporaryDirectory() as folder:
            lab = Path(folder)
            for path in [*HERE.glob('*.py'), HERE / 'requirements.txt']:
                shutil.copy2(path, lab / path.name)
            (lab / 'tokenizer-manifest.json').write_text(text, encoding='utf-8')
            env = {**os.environ, PREPARED_ENV: str(PREPARED)}
            return lab / 'tokenizer-manifest.json', subprocess.run(
                [sys.executable, script], cwd=lab, env=env, capture_output=True, text=True, timeout=120)

    def test_a_manifest_that_is_not_json_not_an_object_or_lacks_a_key_is_one_line(self):
        real = json.loads((HERE / 'tokenizer-manifest.json').read_text(encoding='utf-8'))
        del real['chat_format']['count_scope']  # tokenizer.py reads it; prepare.py never did
        damages = (('{"publisher_model": ', 'not valid JSON (Expecting value: line 1 column 21 (char 20)); '
                                            'restore it with git checkout'),
                   ('[]', 'not a JSON object; restore the manifest with git checkout'),
                   (json.dumps(real), 'missing key chat_format.count_scope; restore the manifest with git checkout'))
        for script in ('prepared_folder.py', 'tokenizer.py'):
            for text, problem in damages:
                with self.subTest(script=script, problem=problem):
                    path, result = self.run_with_manifest(script, text)
                    self.assertEqual((result.returncode, result.stdout), (2, ''))
                    self.assertEqual(result.stderr, f'{script}: {path}: {problem}\n')


if __name__ == '__main__':
    unittest.main()
