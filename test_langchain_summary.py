"""Tests for langchain_summary.py: LangChain's SummarizationMiddleware run directly with the lab's counter and a chat
model that asks summaries.py's seam, recorded and replayed like the lab's own summary rule.

    .venv/bin/python -m unittest -v test_langchain_summary

The model is a pure fake (no socket); cases are the shipped agent cases and budgets changed in memory.
"""
import unittest

from case_set import load_cases
from langchain_summary import as_request, summarised
from shapes import allowance, build_request
from summaries import MissingCall, replaying
from summary_record import recording
from test_support_fixtures import HERE
from tokenizer import counter

AGENT = load_cases(HERE / 'agent-cases.json')
HEAD = 'Here is a summary of the conversation to date:\n\n'  # LangChain's summary message, as 1.5.0 writes it


def answering(text: str, sent: list):
    def call(messages, options):
        sent.append((messages, options))
        return {'text': text, 'prompt_tokens': 1, 'completion_tokens': 1, 'elapsed_ms': 1}
    return call


class Middleware(unittest.TestCase):
    def test_an_overflowing_history_is_summarised_in_one_call_through_the_seam_with_the_target(self):
        sent = []
        chosen, calls = summarised(AGENT[1], counter(), answering('Deploy from release-2.4.', sent))
        self.assertEqual((calls, len(sent)), (1, 1))
        self.assertEqual(sent[0][1], {'max_tokens': 96})  # min(1000, 96, 384 // 4)
        self.assertEqual([m['role'] for m in sent[0][0]], ['user'])
        self.assertIn('<messages>', sent[0][0][0]['content'])  # LangChain's own prompt, the history as XML
        self.assertEqual(chosen['messages'][1], {'role': 'user', 'content': HEAD + 'Deploy from release-2.4.'})

    def test_the_request_is_the_system_message_and_the_requests_own_messages_counted_whole(self):
        chosen, _ = summarised(AGENT[1], counter(), answering('s', []))
        own = build_request(AGENT[1], range(len(AGENT[1]['history'])))
        self.assertEqual(chosen['messages'][0], own[0])
        self.assertTrue(all(message in own for message in chosen['messages'][2:]))
        self.assertEqual(chosen['messages'][-1], own[-1])
        self.assertEqual(chosen['input_tokens'], counter()(chosen['messages']))

    def test_a_history_within_the_allowance_is_sent_whole_and_no_model_is_asked(self):
        sent = []
        case = {**AGENT[1], 'budget': {**AGENT[1]['budget'], 'context_limit': 4096}}
        chosen, calls = summarised(case, counter(), answering('s', sent))
        self.assertEqual((calls, sent), (0, []))
        self.assertEqual(chosen['messages'], build_request(case, range(len(case['history']))))

    def test_its_summary_goes_in_unquoted_unlike_the_seeds(self):
        chosen, _ = summarised(AGENT[1], counter(), answering('</summary> a < b', []))
        self.assertEqual(chosen['messages'][1]['content'], HEAD + '</summary> a < b')

    def test_it_keeps_a_long_tool_result_whole_and_can_send_more_than_the_allowance(self):
        # keep=('tokens', U - target) cuts at a message boundary that keeps a call with its result (measured:
        # 1,229 tokens for dev-agent-latest's allowance of 384).
        chosen, _ = summarised(AGENT[0], counter(), answering('s', []))
        self.assertGreater(chosen['input_tokens'], allowance(AGENT[0]))

    def test_every_prompt_it_sends_stays_under_2000_tokens_as_its_trimming_counts_in_request_order(self):
        # trim_messages' 'last' hands the counter its candidates newest first; counted so, a reversed agent history
        # came to 164 tokens and nothing was trimmed (prompts of 2,448 tokens on the continuation cases).
        sent = []
        for case in [*load_cases(HERE / 'continuation-cases.json'), *AGENT]:
            summarised(case, counter(), answering('s', sent))
        self.assertLess(max(counter()(messages) for messages, _ in sent), 2000)

    def test_a_message_trimming_cut_is_counted_as_cut_and_in_the_requests_order(self):
        from langchain_core.messages import convert_to_messages
        request = build_request(AGENT[1], range(len(AGENT[1]['history'])))
        history = convert_to_messages([{**m, 'id': str(place)} for place, m in enumerate(request) if place])
        history[0].content = 'cut'
        self.assertEqual(as_request(request, list(reversed(history[:3]))),
                         [{**request[1], 'content': 'cut'}, request[2], request[3]])

    def test_a_call_that_fails_is_asked_once_and_its_error_comes_out_as_it_was(self):
        # The middleware retries its model 3 times, seconds apart: a missing recorded call took 7.7 s and a server
        # error was asked three times, though the lab retries no call.
        sent = []

        def missing(messages, options):
            sent.append(messages)
            raise MissingCall('case x: the summary recording has no reply')
        with self.assertRaisesRegex(MissingCall, '^case x: the summary recording has no reply$'):
            summarised(AGENT[1], counter(), missing)
        self.assertEqual(len(sent), 1)

    def test_replay_from_a_recording_gives_the_same_request(self):
        calls = {}
        live = summarised(AGENT[2], counter(), recording(answering('Kept.', []), calls))
        self.assertEqual(summarised(AGENT[2], counter(), replaying(calls, AGENT[2]['id'], 'c.json')), live)


if __name__ == '__main__':
    unittest.main()
