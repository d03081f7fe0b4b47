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


def written_twice(files: dict[str, dict[str, str]]) -> list[str]:
    """Each name defined in two of the files (file -> name -> dump of its definition) that is one idea written
    twice: the support defines it, both define a function of that name, or both define it the same (a constant,
    a class)."""
    found = []
    for defined in sorted({defined for names in files.values() for defined in names}):
        homes = sorted(files, key=lambda name: (not SUPPORT.fullmatch(name.removesuffix('.py')), name))
        homes = [name for name in homes if defined in files[name]]
        for index, home in enumerate(homes):
            first = files[home][defined]
            for name in homes[index + 1:]:
                second = files[name][defined]
                functions = first.startswith('FunctionDef(') and second.startswith('FunctionDef(')
                if SUPPORT.fullmatch(home.removesuffix('.py')) or functions or first == second:
                    found.append(f'{name} defines {defined}, which {home} defines')
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
        again; a function of one name in two test files, or a constant or class defined the same in two, is one
        idea written twice: it goes to the support, or gets a name that says which it is."""
        function, other, constant = "FunctionDef(name='f')", "FunctionDef(name='f', body=[])", "Constant(value=1)"
        self.assertEqual(written_twice({'test_a.py': {'f': function, 'N': constant, 'M': constant, 'S': constant},
                                        'test_b.py': {'f': other, 'N': constant, 'M': "Constant(value=2)"},
                                        'test_support_x.py': {'S': "Constant(value=3)"}}),
                         ['test_b.py defines N, which test_a.py defines', 'test_a.py defines S, which test_support_x.py '
                          'defines', 'test_b.py defines f, which test_a.py defines'])  # M differs: two ideas, one name
        again = written_twice({path.name: definitions(path) for path in tracked('test_*.py')})
        self.assertFalse(again, '\n'.join(again))


if __name__ == '__main__':
    unittest.main()
