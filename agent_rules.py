"""The trimmers people use on agent histories, as a rules file: LangChain's trim_messages and clearing old tool results.

    .venv/bin/python evaluate.py --cases agent-cases.json --rules agent_rules.py --format table

    trim-last           langchain-core 1.8.3's trim_messages(strategy='last'), as its docs show it
    trim-last-human     the same with start_on='human', include_system=True: the documented workaround
    clear-tool-results  every tool result but the newest 3 of the history holds CLEARED (the context editing of
                        LangChain's ClearToolUsesEdit and Anthropic's clear_tool_uses), then `recent` on that

The two trim rules hand trim_messages the whole request (system message, every turn, the question) as LangChain
messages, with the allowance as max_tokens and the lab's exact counter as token_counter, and turn what it keeps
back into the messages the lab builds. Nothing they return is repaired: trim-last may drop the system message or
start on a tool message whose call it cut (LangChain issue #33245), and the lab reports that request invalid.
A selection's turns are the history turns of which at least one message reached the request. The rules read no
labels, never change the case, fetch nothing and write nothing.
"""
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages

from shapes import allowance, build_request, selection, turn_messages
from strategies import recent

# What is measured. Changing either changes clear-tool-results' rows.
KEPT_RESULTS = 3  # tool results left as they were, the newest of the history (ClearToolUsesEdit's default keep)
CLEARED = '[tool result cleared]'  # what an older tool result holds instead


def to_langchain(place: int, message: dict):
    """A request message as LangChain's, its id its place in the request (how the rule finds its turn again):
    a call {'id': 'c1', 'function': {'name': 'f', 'arguments': {...}}} becomes {'id': 'c1', 'name': 'f', 'args': {...}}."""
    role, content, name = message['role'], message['content'], str(place)
    if role == 'tool':
        return ToolMessage(content, id=name, tool_call_id=message['tool_call_id'], name=message.get('name'))
    if role == 'assistant':
        return AIMessage(content, id=name, tool_calls=[
            {'id': call['id'], 'name': call['function']['name'], 'args': call['function']['arguments'],
             'type': 'tool_call'} for call in message.get('tool_calls', ())])
    return (SystemMessage if role == 'system' else HumanMessage)(content, id=name)


def to_lab(message, tools: list) -> dict:
    """A LangChain message back as the lab's request holds it: the inverse of to_langchain, the tools on the system
    message as build_request puts them there."""
    role = {'system': 'system', 'human': 'user', 'ai': 'assistant', 'tool': 'tool'}[message.type]
    plain = {'role': role}
    if role == 'tool':
        plain |= {'tool_call_id': message.tool_call_id} | ({'name': message.name} if message.name is not None else {})
    plain['content'] = message.content
    if role == 'assistant' and message.tool_calls:
        plain['tool_calls'] = [{'id': call['id'], 'type': 'function',
                                'function': {'name': call['name'], 'arguments': call['args']}}
                               for call in message.tool_calls]
    if role == 'system' and tools:
        plain['tools'] = tools
    return plain


def request_counter(count, tools: list):
    """trim_messages' token_counter: the lab's count of the request these messages make. strategy='last' hands it
    its candidates newest first (it reverses the list to search from the end), as if a count did not depend on
    order; a chat template's does, so they are counted in the order of the request trim_messages returns."""
    def counted(messages: list) -> int:
        return count([to_lab(message, tools) for message in sorted(messages, key=lambda message: int(message.id))])
    return counted


def trimmed(case: dict, count, **options) -> dict:
    """A rule: what trim_messages keeps of the whole request within the allowance, with these options."""
    request = build_request(case, range(len(case['history'])))
    turn_of = [None, *(index for index, turn in enumerate(case['history']) for _ in turn_messages(turn)), None]
    tools = case.get('tools', [])
    kept = trim_messages([to_langchain(place, message) for place, message in enumerate(request)],
                         max_tokens=allowance(case), token_counter=request_counter(count, tools), strategy='last',
                         **options)
    messages = [to_lab(message, tools) for message in kept]
    turns = {turn_of[int(message.id)] for message in kept} - {None}
    return selection(messages, list(turns), 0, count(messages))


def cleared(case: dict) -> dict:
    """A copy of the case whose tool results, all but the newest KEPT_RESULTS of the history, hold CLEARED."""
    results = [(index, place) for index, turn in enumerate(case['history']) if type(turn) is list
               for place, message in enumerate(turn) if message['role'] == 'tool']
    old = set(results[:max(0, len(results) - KEPT_RESULTS)])
    history = [[{**message, 'content': CLEARED} if (index, place) in old else message
                for place, message in enumerate(turn)] if type(turn) is list else turn
               for index, turn in enumerate(case['history'])]
    return {**case, 'history': history}


def clear_tool_results(case: dict, count) -> dict:
    """`recent` on the cleared history, counted with the placeholders in place: what the request sends."""
    return recent(cleared(case), count)


RULES = {'trim-last': trimmed,
         'trim-last-human': lambda case, count: trimmed(case, count, start_on='human', include_system=True),
         'clear-tool-results': clear_tool_results}
