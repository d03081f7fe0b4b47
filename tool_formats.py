"""The exact prompt text each counter's official chat template renders for an agent request (tool calls, tool results
and a tools list), with add_generation_prompt on and thinking off, built on the counter's text-only chat format.

    from tool_formats import prompt_text, turn_prompt_text
    prompt_text('qwen-2.5', form, messages, tools)   # form: tokenizer.chat_format(the counter's definition)

A request is OpenAI chat messages: a system message (first, if any), user messages, assistant messages (string
content, '' for OpenAI's null) that may carry tool_calls [{"id", "type": "function", "function": {"name",
"arguments": a JSON object}}], and tool messages {"role": "tool", "tool_call_id", "name" (optional), "content"}.
Invalid orders (a result whose call was dropped, a call without its result, a request that starts with an assistant
or tool message) render as the template renders them, since that is what the model receives; where the template
raises (Gemma 4 on string arguments, Llama 3 on two calls in one message) this raises a one-line ToolFormatError.
phi-3.5's template drops every tool message and tool_calls field: a request holding them is refused.

Additive per turn (a user message and the assistant and tool messages after it, up to the next user message): for
a request of [system] + whole turns + [user question], prompt_text is its head (what the same request with no turns
renders before the question) + the turns' turn_prompt_text + the question's + the generation prompt. That holds for
gemma-4-e2b and qwen-2.5 with or without tools, for llama-3.x without a tools list, and for phi-3.5; with a tools list
Llama's template writes the list into the first message after the system message, so turn_prompt_text is None.
Pure functions of their arguments: it reads and writes no file and counts no tokens.
"""
from collections.abc import Mapping
from itertools import takewhile
import json

from common import LabError
from shapes import holds_thinking_marker

# Each role's required keys besides role, and its optional ones
MESSAGE_KEYS = {'system': ({'content'}, set()), 'user': ({'content'}, set()),
                'assistant': ({'content'}, {'tool_calls'}), 'tool': ({'content', 'tool_call_id'}, {'name'})}
FUNCTION_KEYS = {'name', 'description', 'parameters', 'strict'}
GEMMA_QUOTE = '<|"|>'  # Gemma 4's string delimiter in calls, results and declarations
GEMMA_STANDARD_KEYS = ('description', 'type', 'properties', 'required', 'nullable')
LLAMA_HEADER = '<|start_header_id|>{}<|end_header_id|>\n\n'
LLAMA_TOOLS = ('Given the following functions, please respond with a JSON for a function call with its proper '
               'arguments that best answers the given prompt.\n\nRespond in the format {"name": function name, '
               '"parameters": dictionary of argument name and its value}.Do not use variables.\n\n')
QWEN_TOOLS = ('\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided '
              'with function signatures within <tools></tools> XML tags:\n<tools>')
QWEN_TOOLS_END = ('\n</tools>\n\nFor each function call, return a json object with function name and arguments within '
                  '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
                  '<args-json-object>}\n</tool_call>')
NEXT_USER = {'role': 'user', 'content': ''}  # what follows a turn in a request: some user message


class ToolFormatError(LabError):
    """A request the official template refuses, or one outside the OpenAI chat format this module reads."""


def as_json(value, where: str):
    """A plain-JSON copy of value (plain str, dict, list, int, float, bool, None), or ToolFormatError."""
    try:
        copy = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise ToolFormatError(f'{where}: not JSON ({error})') from None
    if copy != value:  # a tuple, a non-string key: JSON would change it
        raise ToolFormatError(f'{where}: holds values JSON does not keep as they are (tuples, non-string keys)')
    return copy


def checked_call(where: str, call) -> None:
    function = call.get('function') if isinstance(call, dict) else None
    if not (isinstance(function, dict) and set(call) == {'id', 'type', 'function'} and call['type'] == 'function'
            and isinstance(call['id'], str) and set(function) == {'name', 'arguments'}
            and isinstance(function['name'], str)):
        raise ToolFormatError(f'{where}: expected {{"id": str, "type": "function", "function": {{"name": str, '
                              f'"arguments": object}}}}')
    if not isinstance(function['arguments'], dict):
        raise ToolFormatError(f"{where}: arguments must be a JSON object, got {type(function['arguments']).__name__} "
                              "(parse a JSON string first: Gemma 4's template raises on one, Llama 3's and Qwen "
                              "2.5's encode it twice)")


def checked_message(index: int, message) -> dict:
    where = f'message {index}'
    message = as_json(message, where)
    role = message.get('role') if isinstance(message, dict) else None
    if not isinstance(role, str) or role not in MESSAGE_KEYS:
        raise ToolFormatError(f"{where}: expected an object whose role is one of {', '.join(MESSAGE_KEYS)}")
    needed, optional = MESSAGE_KEYS[role]
    if not needed <= set(message) - {'role'} <= needed | optional:
        raise ToolFormatError(f'{where}: a {role} message holds {sorted(needed)} and may hold {sorted(optional)}, '
                              f'got {sorted(set(message) - {"role"})}')
    if not all(isinstance(message[key], str) for key in ('content', 'tool_call_id', 'name') if key in message):
        raise ToolFormatError(f'{where}: content, tool_call_id and name must be strings')
    if role == 'system' and index:
        raise ToolFormatError(f'{where}: a system message may only come first')
    if role == 'assistant' and holds_thinking_marker(message['content']):
        raise ToolFormatError(f'{where}: assistant content with a thinking channel is not counted')
    if not isinstance(message.get('tool_calls', []), list):
        raise ToolFormatError(f'{where}: tool_calls must be a list')
    for number, call in enumerate(message.get('tool_calls', ())):
        checked_call(f'{where}, tool call {number}', call)
    return message


def checked_tools(tools) -> list[dict] | None:
    if tools is None:
        return None
    tools = as_json(tools, 'tools')
    for index, tool in enumerate(tools if isinstance(tools, list) else [None]):
        function = tool.get('function') if isinstance(tool, dict) else None
        if not (isinstance(function, dict) and set(tool) == {'type', 'function'} and tool['type'] == 'function'
                and isinstance(function.get('name'), str) and set(function) <= FUNCTION_KEYS
                and isinstance(function.get('description', ''), str)
                and isinstance(function.get('parameters', {}), dict)):
            raise ToolFormatError(f'tools[{index}]: expected {{"type": "function", "function": {{"name": str, '
                                  f'"description": str, "parameters": object}}}} (tools must be a list of them)')
    return tools


def frame_span(form: dict, role: str, content: str) -> str:
    """One text message in the counter's chat format, as tokenizer.TokenCounter.span writes it."""
    if role == 'system' and not content and form['drop_empty_system']:
        return ''
    return form['open'][role] + (content.strip() if form['trim'] else content) + form['close']


def dict_sorted(mapping: Mapping) -> list:
    """jinja2's dictsort: by key, case-insensitively, ties in the mapping's order."""
    return sorted(mapping.items(), key=lambda item: item[0].lower() if isinstance(item[0], str) else item[0])


def gemma_value(value, escape_keys: bool = True) -> str:
    """Gemma 4's format_argument: {'b': [1, None], 'A': 'x'} -> {<|"|>A<|"|>:<|"|>x<|"|>,<|"|>b<|"|>:[1,null]}"""
    if value is None or isinstance(value, bool):
        return {None: 'null', True: 'true', False: 'false'}[value]
    if isinstance(value, str):
        return GEMMA_QUOTE + value + GEMMA_QUOTE
    if isinstance(value, Mapping):
        return '{' + ','.join((gemma_value(key) if escape_keys else key) + ':' + gemma_value(item, escape_keys)
                              for key, item in dict_sorted(value)) + '}'
    if isinstance(value, list):
        return '[' + ','.join(gemma_value(item, escape_keys) for item in value) + ']'
    return str(value)


def field(schema, key: str):
    """schema[key] as the template reads it: None (falsy, undefined) where schema is no mapping or lacks key."""
    return schema.get(key) if isinstance(schema, Mapping) else None


def upper(schema, key: str) -> str:
    """`schema[key] | upper`: '' when undefined, else the value's text in capitals (null -> 'NONE')."""
    return str(schema[key]).upper() if isinstance(schema, Mapping) and key in schema else ''


def quoted_list(items) -> str:
    if not isinstance(items, list):
        raise ToolFormatError(f"tools: Gemma 4's template reads `required` as a list, got {type(items).__name__}")
    return ','.join(GEMMA_QUOTE + str(item) + GEMMA_QUOTE for item in items)


def gemma_properties(properties, filter_keys: bool = False) -> str:
    """Gemma 4's format_parameters: each property as key:{description,enum|items,nullable,properties,required,type}."""
    if not isinstance(properties, Mapping):
        raise ToolFormatError(f"tools: Gemma 4's template reads properties as an object, got {type(properties).__name__}")
    return ','.join(key + ':{' + gemma_property(value) + '}' for key, value in dict_sorted(properties)
                    if not (filter_keys and key in GEMMA_STANDARD_KEYS))


def gemma_property(value) -> str:
    kind = upper(value, 'type')
    parts = [f"description:{GEMMA_QUOTE}{value['description']}{GEMMA_QUOTE}"] if field(value, 'description') else []
    if kind == 'STRING' and field(value, 'enum'):
        parts.append('enum:' + gemma_value(value['enum']))
    elif kind == 'ARRAY' and isinstance(field(value, 'items'), Mapping) and value['items']:
        parts.append('items:{' + gemma_items(value['items']) + '}')
    if field(value, 'nullable'):
        parts.append('nullable:true')
    if kind == 'OBJECT':  # a schema without properties of its own lists its other keys as properties
        inner = field(value, 'properties')
        parts.append('properties:{' + (gemma_properties(inner) if isinstance(inner, Mapping)
                                       else gemma_properties(value, filter_keys=True)) + '}')
        if field(value, 'required'):
            parts.append('required:[' + quoted_list(value['required']) + ']')
    return ','.join(parts + [f'type:{GEMMA_QUOTE}{kind}{GEMMA_QUOTE}'])


def gemma_items(items: Mapping) -> str:
    parts = []
    for key, value in dict_sorted(items):
        if key == 'properties':
            parts.append('properties:{' + (gemma_properties(value) if isinstance(value, Mapping) else '') + '}')
        elif key == 'required' and value is not None:
            parts.append('required:[' + quoted_list(value) + ']')
        elif key == 'type' and value is not None:
            if not isinstance(value, (str, list)):
                raise ToolFormatError(f"tools: Gemma 4's template reads an items type as text or a list of texts")
            parts.append('type:' + gemma_value(value.upper() if isinstance(value, str) else
                                               [str(kind).upper() for kind in value]))
        elif value is not None:
            parts.append(key + ':' + gemma_value(value))
    return ','.join(parts)


def gemma_declaration(function: dict) -> str:
    params, text = function.get('parameters'), f"declaration:{function['name']}{{description:{GEMMA_QUOTE}"
    text += function.get('description', '') + GEMMA_QUOTE
    if params:
        text += ',parameters:{'
        text += 'properties:{' + gemma_properties(params['properties']) + '},' if field(params, 'properties') else ''
        text += 'required:[' + quoted_list(params['required']) + '],' if field(params, 'required') else ''
        # without a type the template leaves the parameters' brace open
        text += f"type:{GEMMA_QUOTE}{upper(params, 'type')}{GEMMA_QUOTE}}}" if field(params, 'type') else ''
    return '<|tool>' + (text + '}').strip() + '<tool|>'


def gemma_model_text(message: dict, results: list[dict]) -> str:
    """An assistant message's calls, the results that follow it (each named by the call its id matches), text."""
    text = ''
    for call in message.get('tool_calls') or ():
        arguments = call['function']['arguments']
        text += f"<|tool_call>call:{call['function']['name']}{{" + ','.join(
            key + ':' + gemma_value(value, False) for key, value in dict_sorted(arguments)) + '}<tool_call|>'
    for result in results:
        name = result.get('name') or 'unknown'
        for call in message['tool_calls']:
            name = call['function']['name'] if call['id'] == result['tool_call_id'] else name
        text += f"<|tool_response>response:{name}{{value:{gemma_value(result['content'], False)}}}<tool_response|>"
    return text + message['content'].strip()


def gemma_pieces(form: dict, messages: list[dict]) -> tuple[list[str], str | None]:
    """Each message's text (a tool message's is '': an assistant message with calls writes the results after it, and
    a result after anything else is dropped), and what the last non-tool message ended on (None, call, response)."""
    pieces, previous, ended = [], None, None
    for index, message in enumerate(messages):
        role, calls = message['role'], message.get('tool_calls')
        if role == 'tool':
            pieces.append('')
            continue
        results = list(takewhile(lambda later: later['role'] == 'tool', messages[index + 1:])) if calls else []
        ended = 'response' if results else 'call' if calls else None
        text = ('' if role == previous == 'assistant' else form['open'][role]) + gemma_model_text(message, results)
        following = next((later['role'] for later in messages[index + 1:] if later['role'] != 'tool'), None)
        if calls and not results:
            text += '<|tool_response>'  # a call without its result leaves the model turn open
        elif not role == following == 'assistant' and not (results and not message['content'].strip() and following is None):
            text += form['close']  # else the next assistant message goes on in this model turn, or nothing follows
        pieces.append(text)
        previous = role
    return pieces, ended


def gemma_parts(form: dict, system: str | None, body: list[dict], tools) -> tuple[str, list[str], str]:
    head = form['prefix']
    if tools or system is not None:
        head += form['open']['system'] + (system or '').strip() + ''.join(map(gemma_declaration, (
            tool['function'] for tool in tools or ()))) + form['close']
    pieces, ended = gemma_pieces(form, body)
    return head, pieces, '' if ended else form['suffix']


def llama_message(form: dict, index: int, message: dict) -> str:
    if message['role'] == 'tool':  # a string is iterable to jinja2, so the template JSON-quotes the result
        return LLAMA_HEADER.format('ipython') + json.dumps(message['content'], ensure_ascii=False) + form['close']
    if 'tool_calls' not in message:
        return frame_span(form, message['role'], message['content'])
    if len(message['tool_calls']) != 1:
        raise ToolFormatError(f"message {index}: Llama 3's template raises \"This model only supports single "
                              f"tool-calls at once!\" on {len(message['tool_calls'])} calls in one message")
    function = message['tool_calls'][0]['function']  # the assistant's text beside the call is dropped
    return form['open']['assistant'] + f'{{"name": "{function["name"]}", "parameters": ' \
        + json.dumps(function['arguments'], ensure_ascii=False) + '}' + form['close']


def llama_parts(form: dict, system: str | None, body: list[dict], tools, start: int) -> tuple[str, list[str], str]:
    header = LLAMA_HEADER.format('system')
    opening = form['open']['system'] if tools is None else \
        header + 'Environment: ipython\n' + form['open']['system'].removeprefix(header)
    head = form['prefix'] + opening + (system or '').strip() + form['close']
    if tools is not None and not body:
        raise ToolFormatError("Llama 3's template raises \"Cannot put tools in the first user message when there's no "
                              "first user message!\" on a request of only a system message")
    # the tools list goes into the first message after the system message, whatever its role (its calls are lost)
    first = [] if tools is None else [form['open']['user'] + LLAMA_TOOLS + ''.join(
        json.dumps(tool, ensure_ascii=False, indent=4) + '\n\n' for tool in tools) + body[0]['content'].strip()
        + form['close']]
    return head, first + [llama_message(form, start + index, message)
                          for index, message in enumerate(body) if index >= len(first)], form['suffix']


def qwen_message(form: dict, messages: list[dict], index: int) -> str:
    message, role = messages[index], messages[index]['role']
    if role == 'tool':  # consecutive results share one user block
        text = '' if index and messages[index - 1]['role'] == 'tool' else form['open']['user'].removesuffix('\n')
        text += '\n<tool_response>\n' + message['content'] + '\n</tool_response>'
        following = messages[index + 1]['role'] if index + 1 < len(messages) else None
        return text + ('' if following == 'tool' else form['close'])
    if not message.get('tool_calls'):
        return frame_span(form, role, message['content'])
    return form['open']['assistant'].removesuffix('\n') + ('\n' + message['content'] if message['content'] else '') \
        + ''.join('\n<tool_call>\n{"name": "' + call['function']['name'] + '", "arguments": '
                  + json.dumps(call['function']['arguments'], ensure_ascii=False) + '}\n</tool_call>'
                  for call in message['tool_calls']) + form['close']


def qwen_parts(form: dict, system: str | None, body: list[dict], tools) -> tuple[str, list[str], str]:
    system = form['no_system'] if system is None else system  # the default system text, with or without tools
    if tools:
        system += QWEN_TOOLS + ''.join('\n' + json.dumps(tool, ensure_ascii=False) for tool in tools) + QWEN_TOOLS_END
    # a tool message's neighbours decide its tags, and the system message is one (none is a tool message)
    messages = [{'role': 'system'}, *body]
    pieces = [qwen_message(form, messages, index) for index in range(1, len(messages))]
    return form['prefix'] + frame_span(form, 'system', system), pieces, form['suffix']


def phi_parts(form: dict, system: str | None, body: list[dict], tools) -> tuple[str, list[str], str]:
    if tools or any(message['role'] == 'tool' or 'tool_calls' in message for message in body):
        raise ToolFormatError("phi-3.5 does not count tool calls, tool results or a tools list: its official template "
                              "drops every tool message and every tool_calls field (and raises on a call's null content)")
    head = form['prefix'] + ('' if system is None else frame_span(form, 'system', system))
    return head, [frame_span(form, message['role'], message['content']) for message in body], form['suffix']


FAMILIES = {'gemma-4-e2b': gemma_parts, 'llama-3.1': llama_parts, 'llama-3.2': llama_parts, 'llama-3.3': llama_parts,
            'qwen-2.5': qwen_parts, 'phi-3.5': phi_parts}


def request_parts(name: str, form: dict, messages: list[dict], tools, start: int = 0) -> tuple[str, list[str], str]:
    """(head, one text per message after the system message, generation prompt) of a checked request."""
    if name not in FAMILIES:
        raise ToolFormatError(f"no tool format for counter {name!r}; known: {', '.join(FAMILIES)}")
    system = messages[0]['content'] if messages and messages[0]['role'] == 'system' else None
    body = messages[0 if system is None else 1:]
    if FAMILIES[name] is llama_parts:
        return llama_parts(form, system, body, tools, start + (system is not None))
    return FAMILIES[name](form, system, body, tools)


def prompt_text(name: str, form: dict, messages: list[dict], tools: list[dict] | None = None) -> str:
    """The whole prompt the official template of counter `name` renders for this request and tools list."""
    if not isinstance(messages, list) or not messages:
        raise ToolFormatError('a request must be a non-empty list of messages')
    head, pieces, tail = request_parts(name, form, [checked_message(index, message)
                                                    for index, message in enumerate(messages)], checked_tools(tools))
    return head + ''.join(pieces) + tail


def turn_prompt_text(name: str, form: dict, turn: list[dict], tools: list[dict] | None = None) -> str | None:
    """The text one turn adds to every request that holds it whole, given the request's tools list, or None where
    the template is not additive per turn (llama-3.x with a tools list): see the module's docstring."""
    if not isinstance(turn, list) or not turn:
        raise ToolFormatError('a turn must be a non-empty list of messages')
    turn = [checked_message(index, message) for index, message in enumerate(turn)]
    if turn[0]['role'] != 'user' or any(message['role'] in ('user', 'system') for message in turn[1:]):
        raise ToolFormatError('a turn is one user message, then only assistant and tool messages')
    tools = checked_tools(tools)
    if FAMILIES.get(name) is llama_parts and tools is not None:
        return None
    return ''.join(request_parts(name, form, turn + [NEXT_USER], tools)[1][:len(turn)])
