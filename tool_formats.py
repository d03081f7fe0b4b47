"""The exact prompt an official chat template renders (generation prompt on, thinking off) for a request, tool calls
and all, on the counter's chat format: prompt_text('qwen-2.5', tokenizer.chat_format(definition), messages, tools).

Messages are OpenAI's (MESSAGE_KEYS; a call {"id", "type": "function", "function": {"name", "arguments": an
object}}), in any order (a result without its call, no user message first), rendered as the model receives them;
where a template raises (Gemma 4 on string arguments, Llama 3 on two calls in one message), a one-line CounterError
names the message. [system] + whole turns (a user message and the assistant and tool messages after it) + [user
question] renders as its head, each turn's turn_prompt_text, the question's and the generation prompt, for every
counter but llama-3.x with a tools list (per_turn). as_rendered is what grading reads; invalid says why an API
would refuse a request. No files, no token counts.
"""
from collections.abc import Mapping
from itertools import takewhile
import json
import re

from common import LabError

# The official template strips thought channels out of assistant text: no case may hold these (refuse_thinking).
THINKING_MARKERS = ('<|channel>', '<channel|>')
# Each role's required keys besides role, and its optional ones
MESSAGE_KEYS = {'system': ({'content'}, set()), 'user': ({'content'}, set()),
                'assistant': ({'content'}, {'tool_calls'}), 'tool': ({'content', 'tool_call_id'}, {'name'})}
FUNCTION_KEYS = {'name', 'description', 'parameters', 'strict'}
TOOL_NAME = re.compile(r'[a-zA-Z0-9_-]{1,64}')  # what OpenAI accepts as a function's name, whole
# Levels of lists and objects a message or a tools list may nest (a message is 1, its calls' arguments from 5): the
# renderers recurse once or more per level, and Python's stack ends near 1,000 frames (~330 levels of a schema).
MOST_NESTING = 100
QUOTE = '<|"|>'  # Gemma 4's string delimiter in calls, results and declarations
GEMMA_STANDARD_KEYS = ('description', 'type', 'properties', 'required', 'nullable')
LLAMA_HEADER = '<|start_header_id|>{}<|end_header_id|>\n\n'
LLAMA_TOOLS = ('Given the following functions, please respond with a JSON for a function call with its proper '
               'arguments that best answers the given prompt.\n\nRespond in the format {"name": function name, '
               '"parameters": dictionary of argument name and its value}.Do not use variables.\n\n')
QWEN_TOOLS = ('\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided '
              'with function signatures within <tools></tools> XML tags:\n<tools>{}\n</tools>\n\nFor each function '
              'call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n'
              '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>')


class CounterError(LabError):
    """A request the template refuses or this module does not read, or (tokenizer.py) a counter not prepared."""


def nesting(value) -> int:
    """How many levels of lists and objects value nests, counted without recursion and at most MOST_NESTING + 1:
    nesting({'a': [1, {}]}) -> 3."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= MOST_NESTING:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((inner, level + 1) for inner in (item.values() if isinstance(item, dict) else item))
    return deepest


def as_json(value, where: str):
    """A plain-JSON copy of value, or CounterError for what JSON would change (NaN, a tuple, a non-string key), what
    is no text (a lone surrogate) and what nests deeper than MOST_NESTING."""
    deep = CounterError(f'{where}: nests lists and objects more than {MOST_NESTING} levels deep '
                        '(tool_formats.MOST_NESTING), which the lab does not render')
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode('utf-8')
    except RecursionError:
        raise deep from None
    except UnicodeEncodeError:
        raise CounterError(f'{where}: holds a lone surrogate (half a UTF-16 pair), which is not text') from None
    except (TypeError, ValueError) as error:
        raise CounterError(f'{where}: not JSON ({error})') from None
    if text.count('[') + text.count('{') > MOST_NESTING and nesting(value) > MOST_NESTING:  # a count is cheaper
        raise deep
    if (copy := json.loads(text)) != value:
        raise CounterError(f'{where}: holds values JSON does not keep as they are (tuples, non-string keys)')
    return copy


def refuse_thinking(where: str, text: str, error: type[Exception] = CounterError) -> None:
    """`error` naming where the text is if it holds a thinking-channel marker (THINKING_MARKERS says why)."""
    if any(marker in text for marker in THINKING_MARKERS):
        raise error(f'{where} contains a thinking-channel marker {list(THINKING_MARKERS)}, which the counter does not '
                    'cover')


def checked_message(index: int, message) -> dict:
    """The one check of a message, a plain JSON copy of it, or CounterError naming message `index` and its field."""
    where = f'message {index}'
    message = as_json(message, where)
    if not isinstance(message, dict):
        raise CounterError(f"{where}: expected an object whose role is one of {', '.join(MESSAGE_KEYS)}")
    if not isinstance(role := message.get('role'), str) or role not in MESSAGE_KEYS:
        raise CounterError(f'{where}: unknown role {role!r}; expected one of {list(MESSAGE_KEYS)}')
    (needed, optional), keys = MESSAGE_KEYS[role], set(message) - {'role'}
    if not needed <= keys <= needed | optional:
        extra = ' (images and thinking are not counted by this lab)' * bool(keys - needed - optional)
        raise CounterError(f'{where}: a {role} message holds {sorted(needed)} and may hold {sorted(optional)}, '
                           f'got {sorted(keys)}{extra}')
    if not isinstance(message.get('tool_calls', [None]), list) or message.get('tool_calls') == []:
        kind = type(message['tool_calls'])
        got = {dict: 'an object', list: 'an empty list', str: 'a string', type(None): 'null'}.get(kind, kind.__name__)
        raise CounterError(f'{where}: tool_calls must be a non-empty list of calls, got {got}')
    if wrong := [key for key in ('content', 'tool_call_id', 'name') if key in message and not (
            isinstance(message[key], str) and (message[key] or key == 'content'))]:
        raise CounterError(f"{where}: {wrong[0]} must be a {'string' if wrong[0] == 'content' else 'non-empty string'}"
                           f', got {json.dumps(message[wrong[0]], ensure_ascii=False):.40}')
    if role == 'system' and index:
        raise CounterError(f'{where}: a system message may only come first')
    if role == 'assistant':
        refuse_thinking(f'{where}: assistant content', message['content'])
    for number, call in enumerate(message.get('tool_calls', ())):
        function = call.get('function') if isinstance(call, dict) else None
        if not (isinstance(function, dict) and set(call) == {'id', 'type', 'function'} and call['type'] == 'function'
                and isinstance(call['id'], str) and set(function) == {'name', 'arguments'}
                and isinstance(function['name'], str) and call['id'] and function['name']):
            raise CounterError(f'{where}, tool call {number}: expected {{"id", "type": "function", "function": '
                               f'{{"name", "arguments"}}}}, id and name non-empty strings')
        if not isinstance(function['arguments'], dict):
            raise CounterError(f'{where}, tool call {number}: arguments must be a JSON object, got '
                               f"{type(function['arguments']).__name__} (parse a JSON string first: Gemma 4's "
                               "template raises on one, Llama 3's and Qwen 2.5's encode it twice)")
    return message


def checked_request(messages) -> list[dict]:
    """Each message of a request checked (checked_message), or CounterError for a request that is no list or empty."""
    if not isinstance(messages, list) or not messages:
        raise CounterError('a request must be a non-empty list of messages')
    return [checked_message(index, dict(message) if isinstance(message, Mapping) else message)
            for index, message in enumerate(messages)]


def checked_tools(tools) -> list[dict] | None:
    tools = as_json(tools, 'tools')
    for index, tool in enumerate([None] if not isinstance(tools, list | None) else tools or ()):
        function = tool.get('function') if isinstance(tool, dict) else None
        if not (isinstance(function, dict) and set(tool) == {'type', 'function'} and tool['type'] == 'function'
                and isinstance(function.get('name'), str) and set(function) <= FUNCTION_KEYS
                and isinstance(function.get('description', ''), str)
                and isinstance(function.get('parameters', {}), dict)):
            raise CounterError(f'tools[{index}]: expected {{"type": "function", "function": {{"name": str, '
                               f'"description": str, "parameters": object}}}} (tools must be a list of them)')
        if not TOOL_NAME.fullmatch(function['name']):
            raise CounterError(f"tools[{index}]: name {function['name']!r} is not 1 to 64 letters, digits, _ or -, "
                               'which OpenAI requires of a function name')
        if function.get('parameters') and function['parameters'].get('type') != 'object':
            raise CounterError(f'tools[{index}]: parameters must be a schema of type "object", as OpenAI requires; '
                               f"its type is {json.dumps(function['parameters'].get('type'))}")
    return tools


def frame_span(form: dict, role: str, content: str) -> str:
    """One text message in the counter's chat format: its role's opening, the content (stripped where the template
    trims it), the closing; nothing for an empty system message where the template writes none (Phi-3.5's).
    Gemma's: frame_span(form, 'user', ' Hi ') -> '<|turn>user\\nHi<turn|>\\n'."""
    if role == 'system' and not content and form['drop_empty_system']:
        return ''
    return form['open'][role] + (content.strip() if form['trim'] else content) + form['close']


def dict_sorted(mapping: dict) -> list:  # jinja2's dictsort: by key, case-insensitively, ties in the mapping's order
    return sorted(mapping.items(), key=lambda item: item[0].lower())


def gemma_value(value, escape_keys: bool = True) -> str:
    """Gemma 4's format_argument: {'b': [1, None], 'A': 'x'} -> {<|"|>A<|"|>:<|"|>x<|"|>,<|"|>b<|"|>:[1,null]}"""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, dict):
        return '{' + ','.join((gemma_value(key) if escape_keys else key) + ':' + gemma_value(item, escape_keys)
                              for key, item in dict_sorted(value)) + '}'
    if isinstance(value, list):
        return '[' + ','.join(gemma_value(item, escape_keys) for item in value) + ']'
    return json.dumps(value)  # null, true, false, and a number as str() writes it


def quoted_list(items) -> str:
    """A list of texts (for `required`, or an items `type`) as Gemma 4's template writes it: <|"|>a<|"|>,<|"|>b<|"|>"""
    if not isinstance(items, list):
        raise CounterError(f"tools: Gemma 4's template reads `required` and `type` as lists, got {items!r}")
    return ','.join(QUOTE + str(item) + QUOTE for item in items)


def gemma_properties(properties, filter_keys: bool = False) -> str:
    """Gemma 4's format_parameters: each property as key:{description,enum|items,nullable,properties,required,type}."""
    if not isinstance(properties, dict):
        raise CounterError(f"tools: Gemma 4's template reads properties as an object, got {properties!r}")
    return ','.join(key + ':{' + gemma_property(value) + '}' for key, value in dict_sorted(properties)
                    if not (filter_keys and key in GEMMA_STANDARD_KEYS))


def gemma_property(value) -> str:
    value = value if isinstance(value, dict) else {}  # the template reads every key of a non-object as undefined
    kind = str(value['type']).upper() if 'type' in value else ''  # and `| upper` of undefined as ''
    parts = [f"description:{QUOTE}{value['description']}{QUOTE}"] if value.get('description') else []
    if kind == 'STRING' and value.get('enum'):
        parts.append('enum:' + gemma_value(value['enum']))
    elif kind == 'ARRAY' and isinstance(value.get('items'), dict) and value['items']:
        parts.append('items:{' + ','.join(  # each key of the items schema, a null one left out
            'properties:{' + (gemma_properties(inner) if isinstance(inner, dict) else '') + '}' if key == 'properties'
            else 'required:[' + quoted_list(inner) + ']' if key == 'required'
            else 'type:' + (gemma_value(inner) if isinstance(inner, str) else '[' + quoted_list(inner) + ']').upper()
            if key == 'type' else key + ':' + gemma_value(inner)
            for key, inner in dict_sorted(value['items']) if inner is not None) + '}')
    if value.get('nullable'):
        parts.append('nullable:true')
    if kind == 'OBJECT':  # a schema without properties of its own lists its other keys as properties
        own = isinstance(value.get('properties'), dict)
        parts.append('properties:{' + gemma_properties(value['properties'] if own else value, not own) + '}')
        if value.get('required'):
            parts.append('required:[' + quoted_list(value['required']) + ']')
    return ','.join(parts + [f'type:{QUOTE}{kind}{QUOTE}'])


def gemma_declaration(function: dict) -> str:
    params, text = function.get('parameters'), f"declaration:{function['name']}{{description:{QUOTE}"
    text += function.get('description', '') + QUOTE
    if params:
        text += ',parameters:{'
        text += 'properties:{' + gemma_properties(params['properties']) + '},' if params.get('properties') else ''
        text += 'required:[' + quoted_list(params['required']) + '],' if params.get('required') else ''
        text += f'type:{QUOTE}OBJECT{QUOTE}}}'  # checked_tools refuses other types, as OpenAI does
    return '<|tool>' + text + '}<tool|>'


def gemma_model_text(message: dict, results: list[dict]) -> str:
    """An assistant message's calls, the results that follow it (each named by the last call of its id), its text."""
    calls = message.get('tool_calls') or []
    names = {call['id']: call['function']['name'] for call in calls}
    return ''.join(f"<|tool_call>call:{call['function']['name']}{{" + ','.join(
        key + ':' + gemma_value(value, False) for key, value in dict_sorted(call['function']['arguments']))
        + '}<tool_call|>' for call in calls) + ''.join(
        f"<|tool_response>response:{names.get(result['tool_call_id'], result.get('name') or 'unknown')}"
        f"{{value:{gemma_value(result['content'], False)}}}<tool_response|>" for result in results) \
        + message['content'].strip()


def gemma_pieces(form: dict, messages: list[dict]) -> tuple[list[str], bool]:
    """Each message's text (a tool message's is '': the assistant message with calls before it writes it, and a result
    after anything else is dropped), and whether the last non-tool message held calls (then no generation prompt)."""
    pieces, previous, calls = [], None, None
    for index, message in enumerate(messages):
        if message['role'] == 'tool':
            pieces.append('')
            continue
        role, calls, later = message['role'], message.get('tool_calls'), messages[index + 1:]
        results = list(takewhile(lambda after: after['role'] == 'tool', later)) if calls else []
        text = ('' if role == previous == 'assistant' else form['open'][role]) + gemma_model_text(message, results)
        following = next((after['role'] for after in later if after['role'] != 'tool'), None)
        if calls and not results:
            text += '<|tool_response>'  # a call without its result leaves the model turn open
        elif not role == following == 'assistant' and not (results and not message['content'].strip()
                                                           and following is None):
            text += form['close']  # else the next assistant message goes on in this model turn, or nothing follows
        pieces.append(text)
        previous = role
    return pieces, bool(calls)


def gemma_parts(form: dict, system: str | None, body: list[dict], tools) -> tuple[str, list[str], str]:
    block = form['open']['system'] + (system or '').strip() + ''.join(
        gemma_declaration(tool['function']) for tool in tools or ()) + form['close']
    pieces, called = gemma_pieces(form, body)
    return form['prefix'] + (block if tools or system is not None else ''), pieces, '' if called else form['suffix']


def llama_message(form: dict, index: int, message: dict) -> str:
    if message['role'] == 'tool':  # a string is iterable to jinja2, so the template JSON-quotes the result
        return LLAMA_HEADER.format('ipython') + json.dumps(message['content'], ensure_ascii=False) + form['close']
    if 'tool_calls' not in message:
        return frame_span(form, message['role'], message['content'])
    if len(message['tool_calls']) != 1:
        raise CounterError(f"message {index}: Llama 3's template raises \"This model only supports single "
                           f"tool-calls at once!\" on {len(message['tool_calls'])} calls in one message")
    function = message['tool_calls'][0]['function']  # the assistant's text beside the call is dropped
    return form['open']['assistant'] + f'{{"name": "{function["name"]}", "parameters": ' \
        + json.dumps(function['arguments'], ensure_ascii=False) + '}' + form['close']


def llama_parts(form: dict, system: str | None, body: list[dict], tools) -> tuple[str, list[str], str]:
    opening = form['open']['system'] if tools is None else \
        form['open']['system'].replace('\n\n', '\n\nEnvironment: ipython\n', 1)  # after the system header
    if tools is not None and not body:
        raise CounterError("Llama 3's template raises \"Cannot put tools in the first user message when there's no "
                           "first user message!\" on a request of only the system message and tools (as a trimmer "
                           "counting the system message alone sends; docs/counters.md)")
    # the tools list goes into the first message after the system message, whatever its role (its calls are lost)
    first = [] if tools is None else [form['open']['user'] + LLAMA_TOOLS + ''.join(
        json.dumps(tool, ensure_ascii=False, indent=4) + '\n\n' for tool in tools) + body[0]['content'].strip()
        + form['close']]
    rest = enumerate(body[len(first):], start=len(first) + (system is not None))  # indexes in the request
    return form['prefix'] + opening + (system or '').strip() + form['close'], \
        first + [llama_message(form, index, message) for index, message in rest], form['suffix']


def qwen_parts(form: dict, system: str | None, body: list[dict], tools) -> tuple[str, list[str], str]:
    system = form['no_system'] if system is None else system  # the default system text, with or without tools
    if tools:
        system += QWEN_TOOLS.format(''.join('\n' + json.dumps(tool, ensure_ascii=False) for tool in tools))
    roles, pieces = ['system', *(message['role'] for message in body), None], []
    for index, message in enumerate(body, start=1):
        if message['role'] == 'tool':  # consecutive results share one user block
            pieces.append(('' if roles[index - 1] == 'tool' else form['open']['user'].removesuffix('\n'))
                          + f"\n<tool_response>\n{message['content']}\n</tool_response>"
                          + ('' if roles[index + 1] == 'tool' else form['close']))
        elif not message.get('tool_calls'):
            pieces.append(frame_span(form, message['role'], message['content']))
        else:  # the text beside the calls is kept
            text = form['open']['assistant'].removesuffix('\n') + (message['content'] and '\n' + message['content'])
            pieces.append(text + ''.join('\n<tool_call>\n{"name": "' + call['function']['name'] + '", "arguments": '
                                         + json.dumps(call['function']['arguments'], ensure_ascii=False)
                                         + '}\n</tool_call>' for call in message['tool_calls']) + form['close'])
    return form['prefix'] + frame_span(form, 'system', system), pieces, form['suffix']


def chatml_parts(form: dict, system: str | None, body: list[dict], tools) -> tuple[str, list[str], str]:
    """SmolLM2's plain ChatML: its default system message where there is none, then each message framed by its own
    role, a tool message's too (open.tool); the template has no place for tools or calls, so it drops them."""
    system = form['no_system'] if system is None else system
    return form['prefix'] + frame_span(form, 'system', system), \
        [frame_span(form, message['role'], message['content']) for message in body], form['suffix']


def phi_parts(form: dict, system: str | None, body: list[dict], tools) -> tuple[str, list[str], str]:
    if tools or any(message['role'] == 'tool' or 'tool_calls' in message for message in body):
        raise CounterError("phi-3.5 does not count tools: its official template drops every tool message and "
                           "every tool_calls field (and raises on a call's null content)")
    return chatml_parts(form, system, body, tools)  # its no_system is null, and frame_span writes nothing of it


FAMILIES = {'gemma-4-e2b': gemma_parts, 'llama-3.1': llama_parts, 'llama-3.2': llama_parts, 'llama-3.3': llama_parts,
            'qwen-2.5': qwen_parts, 'phi-3.5': phi_parts, 'smollm2-135m': chatml_parts}


def request_parts(name: str, form: dict, messages: list[dict], tools) -> tuple[str, list[str], str]:
    """(head, one text per message after the system message, generation prompt) of a checked request."""
    if name not in FAMILIES:
        raise CounterError(f"no tool format for counter {name!r}; known: {', '.join(FAMILIES)}")
    system = messages[0]['content'] if messages[0]['role'] == 'system' else None
    return FAMILIES[name](form, system, messages[system is not None:], tools)


def prompt_text(name: str, form: dict, messages: list[dict], tools: list[dict] | None = None) -> str:
    """The whole prompt the official template of counter `name` renders for this request and tools list."""
    head, pieces, tail = request_parts(name, form, checked_request(messages), checked_tools(tools))
    return head + ''.join(pieces) + tail


def per_turn(name: str, tools: list[dict] | None) -> bool:
    """Whether a turn renders alike wherever it stands (turn_prompt_text): not Llama 3's with a tools list."""
    return not (FAMILIES.get(name) is llama_parts and tools is not None)


def turn_prompt_text(name: str, form: dict, turn: list[dict], tools: list[dict] | None = None) -> str | None:
    """The text a turn adds to any request holding it whole, with these tools; None where the template is not
    additive per turn (per_turn). Errors give indexes in the turn."""
    turn = [checked_message(index, message) for index, message in enumerate(turn if isinstance(turn, list) else ())]
    if not turn or turn[0]['role'] != 'user' or any(message['role'] == 'user' for message in turn[1:]):
        raise CounterError('a turn is one user message, then only assistant and tool messages')
    tools = checked_tools(tools)
    if not per_turn(name, tools):
        return None
    following = {'role': 'user', 'content': ''}  # what comes after a turn in a request: some user message
    return ''.join(request_parts(name, form, turn + [following], tools)[1][:len(turn)])


def as_rendered(name: str, messages: list[dict]) -> list[dict]:
    """The messages as the grader reads them (scorer.facts_in), less what counter `name`'s template drops of a message
    wherever it stands: Llama 3's text beside a call (llama_message), SmolLM2's calls (chatml_parts). What a template
    drops of a request out of order (Gemma 4 a result whose call is gone, Llama 3 the calls of a message its tools
    list takes) `invalid` refuses in an agent case, whose request then carries no fact."""
    if FAMILIES.get(name) is chatml_parts:
        return [{key: value for key, value in message.items() if key != 'tool_calls'} for message in messages]
    if FAMILIES.get(name) is not llama_parts:
        return messages
    return [{**message, 'content': ''} if message.get('tool_calls') else message for message in messages]


def invalid(messages: list[dict]) -> str | None:
    """Why a provider would refuse this request (docs/agents.md), or None. The system message comes first and a user
    message next, the question last; an assistant message's calls are answered by the tool messages right after it,
    each once, a result answering the open call of its id, and no id is used again while a call of it is open (an id
    answered may come back, as real logs have it). [system, user, tool answering 'c1'] -> 'message 2 (tool) ...'."""
    roles = [message['role'] for message in messages]
    if roles[0] != 'system' or len(roles) < 2:
        return 'the system message is not first' if roles[0] != 'system' else 'the request holds no question'
    for index in (1, len(roles) - 1):  # the first after the system message, and the question
        if roles[index] != 'user':
            return f'message {index} is {roles[index]}, not a user message'
    open_calls = {}  # call id -> the message that made it, until a result answers it
    for index, message in enumerate(messages):
        if message['role'] != 'tool' and open_calls:
            call, at = next(iter(open_calls.items()))
            return f'message {at}: call {call!r} has no result before message {index} ({message["role"]})'
        if message['role'] == 'tool' and open_calls.pop(message['tool_call_id'], None) is None:
            return f'message {index} (tool) answers no call of the assistant message before it'
        for call in message.get('tool_calls', ()):
            if call['id'] in open_calls:
                return f'message {index}: call id {call["id"]!r} is used twice while unanswered'
            open_calls[call['id']] = index
    return None
