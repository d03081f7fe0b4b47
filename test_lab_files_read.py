"""Tests for lab_files' reading: read_json, and check_fields, the one check of a record's fields.

    .venv/bin/python -m unittest -v test_lab_files_read

Each test is named after the failure it pins: a key read twice, a byte order mark, a missing or extra field, a
value of the wrong kind. Everything is written in a temporary folder.
"""
import json
from pathlib import Path
import unittest

from case_set import load_cases
from common import LabError
import lab_files
from lab_files import read_json
from test_support_fixtures import BOM, HERE, TempFolderTest


class CheckFieldsTest(unittest.TestCase):
    def refusal(self, record, spec, **options) -> str:
        with self.assertRaises(LabError) as raised:
            lab_files.check_fields('x.json: case a', record, spec, **options)
        return str(raised.exception)

    def test_a_missing_and_an_extra_key_are_named_in_the_fields_order_and_sorted(self):
        self.assertEqual(self.refusal({'z': 1, 'a': 1, 'c': 2}, dict.fromkeys('cba', lab_files.ANY)),
                         "x.json: case a: must be an object with exactly the fields ['c', 'b', 'a']; missing ['b'], "
                         "unexpected ['z']")

    def test_exactly_the_fields_in_another_order_is_the_record_itself(self):
        record = {'b': 1, 'a': 2}
        self.assertIs(lab_files.check_fields('x', record, dict.fromkeys('ab', lab_files.COUNT)), record)

    def test_a_value_that_is_no_object_is_named_as_json(self):
        self.assertEqual(self.refusal([1, True], {'a': lab_files.ANY}, advice='fix it'),
                         "x.json: case a: must be an object with exactly the fields ['a'], got [1, true]; fix it")

    def test_an_optional_field_may_be_absent_but_not_wrong(self):
        spec = {'a': lab_files.TEXT, 'b': lab_files.POSITIVE}
        self.assertEqual(lab_files.check_fields('x', {'a': 'y'}, spec, optional=['b']), {'a': 'y'})
        self.assertEqual(self.refusal({'a': 'y', 'b': 0}, spec, optional=['b']),
                         'x.json: case a: field b must be a positive integer, got 0')
        self.assertEqual(self.refusal({}, spec, optional=['b']), "x.json: case a: must be an object with exactly the "
                         "fields ['a', 'b'] (b optional); missing ['a'], unexpected []")

    def test_a_nested_field_is_named_by_its_path_and_an_open_record_may_hold_more(self):
        spec = {'pin': {'size': lab_files.INTEGER, 'sha256': lab_files.SHA256}}
        self.assertEqual(self.refusal({'pin': {'size': 3, 'sha256': 'A' * 64}, 'more': 1}, spec, exact=False),
                         f'x.json: case a: field pin.sha256 must be 64 lowercase hex digits, got "{"A" * 36}...')
        self.assertEqual(self.refusal({'pin': {'size': 3}}, spec, exact=False),
                         'x.json: case a: missing field pin.sha256')
        self.assertEqual(self.refusal({}, spec, exact=False), 'x.json: case a: missing field pin')

    def test_the_kinds_refuse_what_json_would_confuse(self):
        for kind, value in ((lab_files.NUMBER, True), (lab_files.COUNT, 1.0), (lab_files.one_of((1, 2)), 1.0),
                            (lab_files.one_of((1, 2)), True), (lab_files.TEXT, ' '), (lab_files.at_most(3), 4),
                            (lab_files.list_of(lab_files.STRING, 'distinct', distinct=True), ['a', 'a']),
                            (lab_files.or_null(lab_files.STRING), 0)):
            with self.subTest(kind=kind[1], value=value):
                self.assertFalse(kind[0](value))
        self.assertTrue(lab_files.or_null(lab_files.STRING)[0](None))

    def test_the_error_is_the_callers_kind(self):
        with self.assertRaises(KeyError):
            lab_files.check_fields('x', {'a': 1}, {'a': lab_files.TEXT}, error=KeyError)


class ReadJsonTest(TempFolderTest):
    def test_a_key_given_twice_is_refused_naming_it_instead_of_the_last_value_winning(self):
        # With the last value winning, this case's stale fact would silently stop being graded.
        path = self.tmp / 'cases.json'
        path.write_text('[{"id": "x", "stale": ["We will use MySQL"], "stale": []}]', encoding='utf-8')
        with self.assertRaises(LabError) as raised:
            load_cases(path)
        self.assertEqual(str(raised.exception), f"{path}: key 'stale' appears twice in one object; a case set names "
                                                'each key once')

    def with_bom(self, path: Path) -> Path:
        copy = self.tmp / path.name
        copy.write_bytes(BOM + path.read_bytes())
        return copy

    def test_a_case_file_and_a_report_saved_with_a_byte_order_mark_read_as_without(self):
        self.assertEqual(load_cases(self.with_bom(HERE / 'cases.json')), load_cases(HERE / 'cases.json'))
        report = HERE / 'evaluation-result.json'
        self.assertEqual(read_json(self.with_bom(report), 'report'), json.loads(report.read_text(encoding='utf-8')))

    def test_an_unreadable_file_is_one_error_naming_it_what_it_was_meant_to_be_and_the_advice(self):
        missing, deep = self.tmp / 'old.json', self.tmp / 'deep.json'
        deep.write_text('[' * 100_000, encoding='utf-8')
        for path, advice, message in (
                (missing, 'run evaluate.py --output first', 'cannot read the report: No such file or directory; '
                                                            'run evaluate.py --output first'),
                (self.tmp, '', 'cannot read the report: Is a directory'),
                (deep, '', 'the report is nested too deeply to read')):
            with self.subTest(message), self.assertRaises(LabError) as raised:
                read_json(path, 'report', advice)
            self.assertEqual(str(raised.exception), f'{path}: {message}')


if __name__ == '__main__':
    unittest.main()
