"""Tests for text.py: what a person reads.

    .venv/bin/python -m unittest -v test_text   (under a second)

Each test is named after the figure or table that would read wrong; every expected string is written out by hand.
"""
import unittest

from text import clipped, counted, markdown_table, plain_number, printable, turn_runs


class TextTest(unittest.TestCase):
    def test_means_print_without_exponents_or_trailing_zeros(self):
        for value, text in ((61.0, '61'), (51.3, '51.3'), (123456.7, '123456.7'), (2000000.0, '2000000')):
            with self.subTest(value):
                self.assertEqual(plain_number(value), text)

    def test_counts_read_as_words_with_thousands_separators(self):
        self.assertEqual([counted(1, 'case'), counted(0, 'fact'), counted(1534, 'case')],
                         ['1 case', '0 facts', '1,534 cases'])

    def test_a_table_lines_up_its_columns_only_when_padded(self):
        self.assertEqual(markdown_table(['a', 'bb'], [['xyz', '1']]), '| a | bb |\n|---|---|\n| xyz | 1 |\n')
        self.assertEqual(markdown_table(['a', 'bb'], [['xyz', '1']], pad=True),
                         '| a   | bb |\n|-----|----|\n| xyz | 1  |\n')

    def test_a_cell_cannot_end_its_row_or_hide_an_override(self):
        self.assertEqual(markdown_table(['a'], [['x|y\u202e\n']]), '| a |\n|---|\n| x\\|y\\u202e\\n |\n')
        self.assertEqual(printable('café'), 'café')

    def test_a_long_text_is_clipped_to_its_length_with_dots_and_a_short_one_kept(self):
        self.assertEqual((clipped('abcdef', 5), clipped('abcde', 5), clipped('', 5)), ('ab...', 'abcde', ''))

    def test_turns_are_counted_from_1_and_consecutive_turns_are_one_run(self):
        self.assertEqual(turn_runs([6, 2, 3, 4]), ['3-5', '7'])
        self.assertEqual((turn_runs([]), turn_runs([0])), ([], ['1']))


if __name__ == '__main__':
    unittest.main()
