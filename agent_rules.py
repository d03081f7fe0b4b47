"""The trimmers people use on agent histories, as a rules file: LangChain's trim_messages and clearing old tool results.

    .venv/bin/python evaluate.py --cases agent-cases.json --rules agent_rules.py --format table

    trim-last           langchain-core 1.8.3's trim_messages(strategy='last'), as its docs show it
    trim-last-human     the same with start_on='human', include_system=True: the documented workaround
    clear-tool-results  every tool result but the newest 3 of the history holds CLEARED (the context editing of
                        LangChain's ClearToolUsesEdit and Anthropic's clear_tool_uses), then `recent` on that

The two trim rules hand trim_messages the whole request (system message, every turn, the question) as LangChain
messages (convert_to_messages), with the allowance as max_tokens and the lab's exact counter as token_counter, and
return the request's own messages that it keeps. Nothing they return is repaired: trim-last may drop the system
message or start on a tool message whose call it cut (LangChain issue #33245), and the lab reports that request
invalid.
A selection's turns are the history turns of which at least one message reached the request. The rules read no
labels, never change the case, fetch nothing and write nothing.
"""
from langchain_core.messages import convert_to_messages, trim_messages

from shapes import allowance, build_request, selection, turn_messages
from strategies import recent

# What is measured. Changing either changes clear-tool-results' rows.
KEPT_RESULTS = 3  # tool results left as they were, the newest of the history (ClearToolUsesEdit's default keep)
CLEARED = '[tool result cleared]'  # what an older tool result holds instead


def in_order(request: list[dict], messages: list) -> list[dict]:
    """The request's own messages that these LangChain messages stand for (each one's id is its place), in the
    request's order. strategy='last' hands token_counter its candidates newest first (it reverses the list to search
    from the end), as if a count did not depend on order; a chat template's does."""
    return [request[place] for place in sorted(int(message.id) for message in messages)]


def trimmed(case: dict, count, **options) -> dict:
    """A rule: what trim_messages keeps of the whole request within the allowance, with these options."""
    request = build_request(case, range(len(case['history'])))
    turn_of = [None, *(index for index, turn in enumerate(case['history']) for _ in turn_messages(turn)), None]
    kept = trim_messages(convert_to_messages([{**message, 'id': str(place)} for place, message in enumerate(request)]),
                         max_tokens=allowance(case), token_counter=lambda messages: count(in_order(request, messages)),
                         strategy='last', **options)
    messages = in_order(request, kept)
    return selection(messages, sorted({turn_of[int(message.id)] for message in kept} - {None}), 0, count(messages))


def cleared(case: dict) -> dict:
    """A copy of the case whose tool results, all but the newest KEPT_RESULTS of the history, hold CLEARED: what
    clear-tool-results' request sends, and so what `recent` counts."""
    results = [(index, place) for index, turn in enumerate(case['history'])
               for place, message in enumerate(turn_messages(turn)) if message['role'] == 'tool']
    history = list(case['history'])
    for index, place in results[:max(0, len(results) - KEPT_RESULTS)]:
        turn = history[index] = list(history[index])  # an agent turn's messages, copied: the case stays as it was
        turn[place] = {**turn[place], 'content': CLEARED}
    return {**case, 'history': history}


RULES = {'trim-last': trimmed,
         'trim-last-human': lambda case, count: trimmed(case, count, start_on='human', include_system=True),
         'clear-tool-results': lambda case, count: recent(cleared(case), count)}
