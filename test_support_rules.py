"""Test support: a temporary folder to write rules files into, and the README's own rules file, for the tests of
`evaluate.py --rules FILE.py` (rule_files.py).

Imported by test files, never run on its own.
"""
from pathlib import Path
import re
import tempfile
import textwrap
import unittest

from case_set import load_cases
import rule_files
from rule_files import RuleError, load_rule_files
from test_support_fixtures import HERE
from tokenizer import counter

# The rules file of the README's "Your own rule", exactly as a reader would paste it.
README_RULES = re.search(r'Save this as `my_rules.py`.*?\n```python\n(.*?)```\n',
                         (HERE / 'README.md').read_text(encoding='utf-8'), re.S)[1]


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
            self.rule(body, timeout=timeout)(case_named(case_id), counter())
        self.assertNotIn('\n', str(raised.exception))
        return str(raised.exception)
