"""Tests for rules files: the plug-in contract of `evaluate.py --rules FILE.py` (rule_files.py).

    .venv/bin/python -m unittest -v test_rule_files.py

What a rule receives and returns, and how the turns of what it returns are found. Each test is named after the
failure it pins. Figures come from the recorded report or are worked out by hand; rules files are written into
temporary folders only. Every rule runs in a real rules process; a rule that searches frames and the garbage
collector for the labels finds none. The files the lab refuses are test_rule_files_refusals.py's, what goes
wrong in the rules process test_rule_files_process.py's, the report and command line test_rule_files_command.py's.
"""
from itertools import chain, combinations
import json
import os
import unittest

from case_set import load_cases
from scorer import graded_row
from evaluate import report
from rule_files import carried_turns, first_copies, load_rule_files, turn_places
from shapes import build_request, turn_key, turn_messages
from test_support_fixtures import HERE, RECORDED
from test_support_rules import RulesFolder, case_named
from tokenizer import counter


class ContractTest(RulesFolder):
    def test_a_rule_never_sees_the_labels(self):
        selected = self.rule('return [{"role": "user", "content": ",".join(sorted(case))}]')(
            case_named('dev-correction'), counter())
        self.assertEqual(selected['messages'][0]['content'], 'budget,current,history,id,instructions,kind,split')

    def test_a_rule_that_searches_frames_and_the_garbage_collector_finds_no_labels_to_read_or_change(self):
        # In the lab's own process this rule found the graded case and scored exactly the best possible; writing
        # to its labels changed the best possible row. In the rules process there is no labelled case to find.
        path = self.write(CHEAT, 'cheat.py')
        rules, _ = load_rule_files([path])
        said = rules['cheat'](case_named('dev-correction'), counter())['messages'][-1]['content']
        self.assertTrue(said.startswith('labelled objects found: 0, objects searched: '), said)
        self.assertGreater(int(said.split(': ')[-1].split('\n')[0]), 1000)  # the search did run
        recorded = json.loads(RECORDED.read_text(encoding='utf-8'))
        result = report(HERE / 'cases.json', [path])
        self.assertEqual([result['summary']['cheat'][split]['facts_found'] for split in ('dev', 'held_out')], [0, 0])
        self.assertEqual(result['best_possible'], recorded['best_possible'])
        for name in ('recent', 'relevant', 'notes', 'hybrid'):
            self.assertEqual(result['cases'][name], recorded['cases'][name])

    def test_a_message_that_reads_short_when_counted_and_long_when_copied_is_counted_as_graded(self):
        # A dict whose content is the whole history when read from a comprehension (the lab's copy) and the
        # question otherwise (the counter): in the lab's own process it was counted at 35 tokens and graded
        # with its fact, "within budget". As JSON it crosses once, and the lab counts the very text it grades.
        rule = self.rule('''
            import sys
            class Shifty(dict):
                def __getitem__(self, key):
                    if key == 'content' and sys._getframe(1).f_code.co_name == '<listcomp>':
                        return ' '.join(turn['user'] + ' ' + turn['assistant'] for turn in case['history'])
                    return dict.__getitem__(self, key)
                def items(self):
                    return [(key, self[key]) for key in self]
            request = build_request(case, [])
            request[-1] = Shifty(request[-1])
            return request''')
        case = case_named('dev-correction')
        selected = rule(case, counter())
        self.assertEqual(selected['input_tokens'], counter()(selected['messages']))
        row = graded_row(case, selected)
        self.assertEqual((row['required_found'], row['within_budget']), (1, False))  # the whole history is sent

    def test_a_request_changed_after_it_was_counted_is_counted_as_returned(self):
        # The lab reuses its count of a request only when the rule returns that very text.
        rule = self.rule('''
            request = build_request(case, [])
            before = count(request)
            request[-1]['content'] += ' And the history? ' + case['history'][0]['user']
            return {'messages': request, 'input_tokens': before}''')
        selected = rule(case_named('dev-correction'), counter())
        self.assertEqual(selected['input_tokens'], counter()(selected['messages']))
        self.assertGreater(selected['input_tokens'], counter()(build_request(case_named('dev-correction'), [])))

    def test_a_rule_that_changes_its_history_does_not_change_what_the_next_call_sees(self):
        # The rules process hands the next call the copy the call before got only while it equals the original.
        rule = self.rule('''
            first = case['history'][0]['user']
            case['history'][0]['user'] = 'changed'
            case['history'].append({'user': 'added', 'assistant': 'added'})
            return [{'role': 'user', 'content': first}]''')
        case = case_named('dev-correction')
        self.assertEqual([rule(case, counter())['messages'][0]['content'] for _ in range(2)],
                         [case['history'][0]['user']] * 2)

    def test_a_request_sent_as_its_turns_is_counted_and_graded_as_its_messages(self):
        # count.count_built sends only the turns and notes; the lab builds the request from its own copy of the case.
        selected = self.rule('''
            request = build_request(case, [1, 0], ['- a note'])
            return {'messages': request, 'size': count.count_built(request, case, [1, 0], ['- a note'])}''')(
            case := case_named('dev-correction'), counter())
        request = build_request(case, [0, 1], ['- a note'])
        self.assertEqual((selected['messages'], selected['turns']), (request, [0, 1]))
        self.assertEqual(selected['input_tokens'], len(counter().encode(counter().prompt(request))))  # rendered whole

    def test_a_request_of_whole_turns_is_summed_in_the_rules_process_without_asking_the_lab(self):
        # Three pipe exchanges per rule and case (the bare count, the request's, the reply) were a second of a
        # LoCoMo sweep: the lab now sends the bare count and says its counter sums pair requests, so only the reply
        # crosses. A rule that could not ask again still gets the lab's figures, and the lab counts what it returns.
        selected = self.rule('''
            from strategies import fitting
            costs = count.turn_costs(case['history'])  # asked once per conversation
            count.ask = None  # any further question to the lab fails
            return fitting(case, count, [1, 0])''')(case := case_named('dev-correction'), counter())
        request = build_request(case, [0, 1])
        self.assertEqual((selected['messages'], selected['turns']), (request, [0, 1]))
        self.assertEqual(selected['input_tokens'], len(counter().encode(counter().prompt(request))))  # rendered whole

    def test_a_request_summed_in_the_rules_process_then_changed_is_counted_as_returned(self):
        # What the rules process summed travels as turns only while the rule returns that very request.
        selected = self.rule('''
            request = build_request(case, [0])
            count.count_built(request, case, [0])
            request[1] = {'role': 'user', 'content': 'changed'}
            return request''')(case := case_named('dev-correction'), counter())
        self.assertEqual(selected['messages'][1]['content'], 'changed')
        self.assertEqual(selected['input_tokens'], counter()(selected['messages']))

    def test_turns_a_rules_process_reports_it_summed_are_checked_by_the_lab(self):
        # The reply's turns come from a process that runs user code: the lab checks them as a count's.
        self.assertEqual(self.refusal('''
            count.count_built(build_request(case, [0]), case, [0])
            count.built = {'kept': [0, 0], 'notes': []}, build_request(case, [0, 0])
            return build_request(case, [0, 0])''', 'dev-correction').split(': ', 1)[1],
            'rule mine: case dev-correction: returned turns the counter does not accept: count: expected {"kept": '
            'distinct turn indices below 3, "notes": texts}')

    def test_a_request_built_of_a_case_the_rule_changed_is_counted_and_graded_as_the_rule_built_it(self):
        # Only a request of the case as the lab sent it travels as its turns: the lab would build another.
        selected = self.rule('''
            from strategies import fitting
            return fitting(dict(case, current='Answer briefly. ' + case['current']), count, [0, 1])''')(
            case := case_named('dev-correction'), counter())
        self.assertEqual(selected['messages'][-1]['content'], 'Answer briefly. ' + case['current'])
        self.assertEqual(selected['input_tokens'], len(counter().encode(counter().prompt(selected['messages']))))

    def test_turns_sent_as_other_than_distinct_indices_of_the_history_are_refused_naming_rule_and_case(self):
        for kept, notes in (([0, 0], []), ([9], []), ([True], []), (['0'], []), ([0], [1])):
            with self.subTest(kept=kept, notes=notes):
                body = f'import json\nreturn count.ask("count", json.dumps({{"kept": {kept!r}, "notes": {notes!r}}}))'
                self.assertEqual(self.refusal(body.replace("'", '"'), 'dev-correction').split(': ', 1)[1],
                                 'rule mine: case dev-correction: the rule raised CounterError: count: expected '
                                 '{"kept": distinct turn indices below 3, "notes": texts} (line 5 of rules.py)')

    def test_one_rules_process_serves_every_rule_and_case_and_it_is_not_the_lab(self):
        path = self.write('import os\nRULES = {name: lambda case, count: [{"role": "user", "content": str(os.getpid())}]'
                          ' for name in ("one", "two")}\n')
        rules, _ = load_rule_files([path])
        pids = {rule(case, counter())['messages'][0]['content'] for rule in rules.values()
                for case in load_cases(HERE / 'cases.json')}
        self.assertEqual(len(pids), 1)
        self.assertNotEqual(pids, {str(os.getpid())})

    def test_a_rules_file_imports_a_helper_module_beside_it_and_writes_no_bytecode(self):
        self.write('PREFIX = "from the helper: "\n', 'my_helper.py')
        path = self.write('import my_helper\nRULES = {"helped": lambda case, count: '
                          '[{"role": "user", "content": my_helper.PREFIX + case["current"]}]}\n')
        selected = load_rule_files([path])[0]['helped'](case_named('dev-latest'), counter())
        self.assertEqual(selected['messages'][0]['content'], 'from the helper: ' + case_named('dev-latest')['current'])
        self.assertEqual(sorted(p.name for p in path.parent.iterdir()), ['my_helper.py', 'rules.py'])

    def test_a_plain_list_of_messages_is_a_request(self):
        selected = self.rule('return build_request(case, [0, 1])')(case_named('dev-correction'), counter())
        row = graded_row(case_named('dev-correction'), selected)
        self.assertEqual((row['turns'], row['required_found'], row['stale_included']), ([0, 1], 1, ['We will use MySQL']))

    def test_a_request_over_the_allowance_is_graded_and_marked_not_refused(self):
        # dev-old-decision's history holds a turn larger than the whole 256-token allowance.
        case = case_named('dev-old-decision')
        row = graded_row(case, self.rule('return build_request(case, [0, 1, 2])')(case, counter()))
        self.assertEqual((row['turns'], row['within_budget'], row['required_found']), ([0, 1, 2], False, 1))
        self.assertGreater(row['input_tokens'], 256)


CHEAT = '''\
import gc
import sys


def cheat(case, count):
    """Look for the labelled case in every frame up the stack and in every object alive; copy its facts, change them."""
    facts, labelled = [], []
    frame = sys._getframe(1)
    while frame is not None:
        labelled += [value for value in list(frame.f_locals.values()) if isinstance(value, dict) and 'required' in value]
        frame = frame.f_back
    searched = gc.get_objects()
    labelled += [value for value in searched if isinstance(value, dict) and 'required' in value]
    for found in labelled:
        facts += found['required']
        found['required'].append('a fact no message states')
        found['stale'].extend(found['required'])
    return [{'role': 'system', 'content': case['instructions']},
            {'role': 'user', 'content': '\\n'.join([f'labelled objects found: {len(labelled)}, objects searched: '
                                                   f'{len(searched)}', *facts, case['current']])}]


RULES = {'cheat': cheat}
'''


class TurnDetectionTest(unittest.TestCase):
    HISTORY = [{'user': 'a', 'assistant': 'b'}, {'user': 'c', 'assistant': 'd'}, {'user': 'a', 'assistant': 'b'}]

    @staticmethod
    def messages(*pairs) -> list[dict]:
        return [{'role': role, 'content': content} for role, content in pairs]

    def test_a_turn_counts_only_as_its_user_then_assistant_message_side_by_side(self):
        split = self.messages(('system', 's'), ('user', 'c'), ('user', 'q'), ('assistant', 'd'), ('user', 'q'))
        swapped = self.messages(('assistant', 'd'), ('user', 'c'), ('user', 'q'))
        lone = self.messages(('user', 'c'), ('user', 'q'))
        reworded = self.messages(('user', 'c '), ('assistant', 'd'), ('user', 'q'))
        for messages in (split, swapped, lone, reworded):
            self.assertEqual(carried_turns(messages, turn_places(self.HISTORY)), [])

    def test_a_repeated_turn_takes_the_earliest_free_copy_and_a_turn_sent_twice_counts_once(self):
        once = self.messages(('user', 'a'), ('assistant', 'b'), ('user', 'q'))
        twice = self.messages(('user', 'a'), ('assistant', 'b'), ('user', 'a'), ('assistant', 'b'), ('user', 'q'))
        thrice = [*twice[:2], *twice]
        cd_twice = self.messages(('user', 'c'), ('assistant', 'd'), ('user', 'c'), ('assistant', 'd'))
        self.assertEqual(carried_turns(once, turn_places(self.HISTORY)), [0])
        self.assertEqual(carried_turns(twice, turn_places(self.HISTORY)), [0, 2])
        self.assertEqual(carried_turns(thrice, turn_places(self.HISTORY)), [0, 2])
        self.assertEqual(carried_turns(cd_twice, turn_places(self.HISTORY)), [1])

    def test_a_request_built_of_kept_turns_carries_the_turns_carried_turns_finds_in_it(self):
        history = [*self.HISTORY, self.HISTORY[1], {'user': 'e', 'assistant': 'f'}]  # turns 0 and 2, 1 and 3 alike
        places = turn_places(history)
        copies = [places[turn_key(turn_messages(turn))] for turn in history]
        for kept in chain.from_iterable(combinations(range(len(history)), size) for size in range(len(history) + 1)):
            with self.subTest(kept=kept):
                request = build_request({'instructions': 's', 'current': 'q', 'history': history}, kept)
                self.assertEqual(first_copies(list(kept), copies), carried_turns(request, places))

    def test_turns_are_found_in_any_order_the_rule_sends_them(self):
        newest_first = self.messages(('user', 'c'), ('assistant', 'd'), ('user', 'a'), ('assistant', 'b'))
        self.assertEqual(carried_turns(newest_first, turn_places(self.HISTORY[:2])), [0, 1])


if __name__ == '__main__':
    unittest.main()
