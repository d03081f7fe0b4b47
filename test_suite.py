"""Tests of the test suite itself: it holds the test files to the test support.

    .venv/bin/python -m unittest -v test_suite.py   (about a second)

No test file imports another, only the test support's modules (test_support*.py); what the support defines is
defined in no test file again; and no function or top-level constant is defined in two test files.
"""
import ast
from pathlib import Path
import re
import unittest

from test_support_lab import tracked


SUPPORT = re.compile(r'test_support(_[a-z]+)?')  # the test support's modules, which every test file may import
# Top-level functions of one name in two test files that do different things, each in its own file
HOMONYMS = {'counts', 'question', 'run'}


def definitions(path: Path) -> dict[str, str]:
    """Each name the module's top level defines (def, class or assignment), with a dump of what defines it."""
    found = {}
    for node in ast.parse(path.read_text(encoding='utf-8')).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found[node.name] = ast.dump(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                found.update((name.id, ast.dump(node.value)) for name in ast.walk(target) if isinstance(name, ast.Name))
    return found


class TestSuiteTest(unittest.TestCase):
    def test_no_test_file_imports_another_only_the_test_support(self):
        for path in tracked('test_*.py'):
            nodes = list(ast.walk(ast.parse(path.read_text(encoding='utf-8'))))
            modules = [alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names]
            modules += [node.module for node in nodes if isinstance(node, ast.ImportFrom) and node.module]
            self.assertEqual([name for name in modules if name.startswith('test_') and not SUPPORT.fullmatch(name)],
                             [], path.name)

    def test_what_the_support_defines_is_defined_nowhere_else_and_no_test_function_twice(self):
        """A name the test support defines (a helper, generator, oracle or constant) is imported, never defined
        again; a function defined in two test files is one idea written twice, unless HOMONYMS lists its name and
        the two do differ."""
        files = {path.name: definitions(path) for path in tracked('test_*.py')}
        homes, again = {}, []
        for name in sorted(files, key=lambda name: not SUPPORT.fullmatch(name.removesuffix('.py'))):
            for defined, what in files[name].items():
                home = homes.setdefault(defined, (name, what))
                support = SUPPORT.fullmatch(home[0].removesuffix('.py'))
                function = what.startswith('FunctionDef(')
                if home[0] != name and (support or function and (defined not in HOMONYMS or what == home[1])):
                    again.append(f'{name} defines {defined}, which {home[0]} defines')
        self.assertFalse(again, '\n'.join(again))


if __name__ == '__main__':
    unittest.main()
